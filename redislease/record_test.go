package redislease

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/policy"
)

const goodToken = "0123456789abcdef0123456789abcdef"

func TestDecodeTable(t *testing.T) {
	good := policy.Record{Present: true, Holder: "node-a", Version: 7, Token: goodToken, LeaseSpan: 37 * time.Second}
	good.Raw = Encode(good)
	if r, err := Decode("k", good.Raw); err != nil || r != good {
		t.Fatalf("round trip: %+v %v", r, err)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `"x"`, `{}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"held"}`,
		`{"holder":"node-a","version":0,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":-1,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":1e3,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":9007199254740993,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node a","version":7,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":7,"token":"XYZ","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"held","lease_span_ms":1,"extra":1}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"held","lease_span_ms":1} {}`,
		`{"holder":7,"version":7,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		// next names a node, and only on a released record.
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"held","lease_span_ms":1,"next":"node-b"}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"stop_failed","lease_span_ms":1,"next":"node-b"}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"next":"-b"}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"next":7}`,
		`{"holder":"node-a","version":7,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"next":""}`,
	} {
		r, err := Decode("unitlease:lease:x", bad)
		var g *GarbageError
		if !errors.As(err, &g) || g.Key != "unitlease:lease:x" || r != (policy.Record{Present: true, Raw: bad}) {
			t.Errorf("Decode(%s) = %+v, %v, want a GarbageError naming the key and the value alone", bad, r, err)
		}
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to a
// record it decodes identically. The seed corpus is in testdata/fuzz.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(Encode(policy.Record{Holder: "node-a", Version: 1, Token: goodToken, LeaseSpan: 36 * time.Second})))
	f.Add([]byte(Encode(policy.Record{Holder: "n.b_c-d", Version: 1 << 52, Token: goodToken, Released: true})))
	f.Add([]byte(`{"holder":"node-a","version":"1","token":"` + goodToken + `","state":"held","lease_span_ms":1}`))
	f.Add([]byte(Encode(policy.Record{Holder: "node-a", Version: 9, Token: goodToken, Released: true, Next: "node-b"})))
	f.Fuzz(func(t *testing.T, b []byte) {
		raw := string(b)
		r, err := Decode("k", raw)
		// The fast path accepts only what the JSON decoder accepts, and
		// reads the same record.
		if fast, ok := decodeCanonical(raw); ok {
			slow, err := decodeJSON("k", raw)
			if err != nil || slow.record(raw) != fast {
				t.Fatalf("canonical %+v, JSON %+v, %v", fast, slow, err)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrGarbage) {
				t.Fatalf("error not ErrGarbage: %v", err)
			}
			return
		}
		again, err := Decode("k", Encode(r))
		if err != nil || again.Raw != Encode(r) || !sameFields(again, r) {
			t.Fatalf("re-encoded %+v decodes as %+v, %v", r, again, err)
		}
	})
}

func TestDecodeCanonicalReadsWhatEncodeWrites(t *testing.T) {
	for _, r := range []policy.Record{
		{Present: true, Holder: "node-a", Version: 1, Token: goodToken, LeaseSpan: 36072 * time.Millisecond},
		{Present: true, Holder: "n.b_c-d", Version: 1 << 52, Token: goodToken, Released: true},
		{Present: true, Holder: "node-a", Version: 9, Token: goodToken, Released: true, Next: "node-b"},
	} {
		r.Raw = Encode(r)
		if got, ok := decodeCanonical(r.Raw); !ok || got != r {
			t.Errorf("%s: read %+v, %t", Encode(r), got, ok)
		}
	}
	for _, raw := range []string{
		`{"holder":"node-a","version":01,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1} `,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1,"x":1}`,
		`{"holder":"node a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1,"next":"node-b"}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"next":"node b"}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"next":""}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"nexy":"node-b"}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"released","lease_span_ms":1,"next":"node-b","next":"node-c"}`,
	} {
		if r, ok := decodeCanonical(raw); ok {
			t.Errorf("%s: read as %+v", raw, r)
		}
	}
}

// sameFields reports whether two records say the same, whatever their bytes.
func sameFields(a, b policy.Record) bool {
	a.Raw, b.Raw = "", ""
	return a == b
}

// TestDecodeCarriesTheWritersSpan: the policy reads the writer's lease
// span from the record, which the standby waits out if it is the longer.
func TestDecodeCarriesTheWritersSpan(t *testing.T) {
	raw := `{"holder":"b","version":3,"token":"` + strings.Repeat("b", 32) + `","state":"held","lease_span_ms":60000}`
	if got, err := Decode("k", raw); err != nil || got.LeaseSpan != time.Minute || got.Holder != "b" || got.Version != 3 || got.Raw != raw {
		t.Fatalf("Decode = %+v, %v; want holder b at version 3 with a lease span of 1m and the bytes as read", got, err)
	}
}

// TestDecodeRefusesWhatCouldMeanTwoThings: a record with a field twice,
// or a lease span no timing allows, is garbage: reported, never written
// over.
func TestDecodeRefusesWhatCouldMeanTwoThings(t *testing.T) {
	tok := strings.Repeat("a", 32)
	for _, c := range []struct{ raw, want string }{
		{`{"holder":"a","version":7,"token":"` + tok + `","state":"held","lease_span_ms":1000,"holder":"b"}`, `the field "holder" appears twice`},
		{`{"holder":"a","holder":"b","version":7,"token":"` + tok + `","state":"held","lease_span_ms":1000}`, `the field "holder" appears twice`},
		{`{"holder":"a","version":7,"token":"` + tok + `","state":"held","lease_span_ms":9007199254740991}`, "lease_span_ms 9007199254740991 is above 3600000"},
		{`{"holder":"a","version":7,"token":"` + tok + `","state":"held","lease_span_ms":3600001}`, "lease_span_ms 3600001 is above 3600000"},
	} {
		_, err := Decode("k", c.raw)
		if !errors.Is(err, ErrGarbage) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.raw, err, c.want)
		}
	}
	ok := `{"holder":"a","version":7,"token":"` + tok + `","state":"held","lease_span_ms":3600000}`
	if r, err := Decode("k", ok); err != nil || r.LeaseSpan != time.Hour {
		t.Errorf("the longest lease span: %+v, %v", r, err)
	}
}
