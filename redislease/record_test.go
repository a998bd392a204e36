package redislease

import (
	"errors"
	"testing"
)

const goodToken = "0123456789abcdef0123456789abcdef"

func TestDecodeTable(t *testing.T) {
	good := Record{Holder: "node-a", Version: 7, Token: goodToken, State: StateHeld, LeaseSpanMS: 37000}
	if r, err := Decode("k", Encode(good)); err != nil || r != good {
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
	} {
		_, err := Decode("unitlease:lease:x", []byte(bad))
		var g *GarbageError
		if !errors.As(err, &g) || g.Key != "unitlease:lease:x" {
			t.Errorf("Decode(%s) = %v, want a GarbageError naming the key", bad, err)
		}
	}
}

// FuzzDecode: Decode never panics, and whatever it accepts re-encodes to a
// record it decodes identically. The seed corpus is in testdata/fuzz.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(Record{Holder: "node-a", Version: 1, Token: goodToken, State: StateHeld, LeaseSpanMS: 36000}))
	f.Add(Encode(Record{Holder: "n.b_c-d", Version: 1 << 52, Token: goodToken, State: StateReleased}))
	f.Add([]byte(`{"holder":"node-a","version":"1","token":"` + goodToken + `","state":"held","lease_span_ms":1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := Decode("k", raw)
		// The fast path accepts only what the JSON decoder accepts, and
		// reads the same record.
		if fast, ok := decodeCanonical(raw); ok {
			slow, err := decodeJSON("k", raw)
			if err != nil || slow != fast {
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
		if err != nil || again != r {
			t.Fatalf("re-encoded %+v decodes as %+v, %v", r, again, err)
		}
	})
}

func TestDecodeCanonicalReadsWhatEncodeWrites(t *testing.T) {
	for _, r := range []Record{
		{Holder: "node-a", Version: 1, Token: goodToken, State: StateHeld, LeaseSpanMS: 36072},
		{Holder: "n.b_c-d", Version: 1 << 52, Token: goodToken, State: StateReleased},
	} {
		if got, ok := decodeCanonical(Encode(r)); !ok || got != r {
			t.Errorf("%s: read %+v, %t", Encode(r), got, ok)
		}
	}
	for _, raw := range []string{
		`{"holder":"node-a","version":01,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1} `,
		`{"holder":"node-a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1,"x":1}`,
		`{"holder":"node a","version":1,"token":"` + goodToken + `","state":"held","lease_span_ms":1}`,
	} {
		if r, ok := decodeCanonical([]byte(raw)); ok {
			t.Errorf("%s: read as %+v", raw, r)
		}
	}
}
