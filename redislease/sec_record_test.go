package redislease

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// TestSecDecodeCaseFoldedDuplicate: duplicateKey compares the field
// names exactly, but encoding/json matches them case-insensitively (and
// with Unicode simple folding: U+017F 'ſ' folds to 's', U+212A 'K' to
// 'k'). So {"state":"stop_failed",...,"State":"held"} has no duplicate to
// duplicateKey and DisallowUnknownFields (State is a known field), Go
// keeps the last ("held"), and the Lua scripts' cjson, which knows only
// the exact "state", reads "stop_failed". The record means two things.
func TestSecDecodeCaseFoldedDuplicate(t *testing.T) {
	tok := strings.Repeat("a", 32)
	base := `{"holder":"node-a","version":7,"token":"` + tok + `","state":"stop_failed","lease_span_ms":1000`
	for _, extra := range []string{
		`,"State":"held"}`,
		`,"STATE":"released"}`,
		`,"ſtate":"held"}`,      // U+017F LATIN SMALL LETTER LONG S
		`,"\u017ftate":"held"}`, // the same, escaped
		`,"HOLDER":"node-b"}`,   // Go: holder node-b; Lua: node-a
		`,"lease_span_mS":3600000}`,
	} {
		raw := base + extra
		r, err := Decode("k", raw)
		if !errors.Is(err, ErrGarbage) {
			t.Errorf("%s: decoded as holder %s, state %s, span %v (Lua reads holder node-a, stop_failed, 1s); want garbage",
				raw, r.Holder, StateOf(r), r.LeaseSpan)
		}
	}
}

// TestSecCaseFoldedRecordStuck: the consequence in Redis. Go reads
// the record as held by node-a (so `reset` refuses: not garbage, and
// `clear` refuses: not stop_failed); every acquire script reads it as
// stop_failed and answers conflict. Nothing unitlease offers can free
// the lease; only a DEL by hand.
func TestSecCaseFoldedRecordStuck(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := newStore(t, srv, "node-b")
	tok := strings.Repeat("a", 32)
	raw := `{"holder":"node-a","version":7,"token":"` + tok + `","state":"stop_failed","lease_span_ms":1000,"State":"held"}`
	srv.Command("SET", b.Key("db"), raw)
	seen, err := b.Observe(bg, "db")
	if err != nil {
		return // refused as garbage: reset can replace it
	}
	t.Logf("Go observes: holder %s, state %s", seen.Holder, StateOf(seen))
	_, acqErr := b.Acquire(bg, "db", seen)
	_, _, _, clearErr := b.Clear(bg, "db")
	if acqErr != nil {
		t.Errorf("Go reads %s, so a standby ages it and acquires; the script refuses: %v; clear: %v; reset refuses a value that decodes",
			StateOf(seen), acqErr, clearErr)
	}
}

// TestSecDerivedLeaseSpanAboveDecodeLimit: every timing key is at
// most MaxDuration (1 h), but the derived lease span (lease_span = 0:
// retry + renew_deadline + allowance + stop_wait, scaled) is not bounded:
// a stop_wait of 1 h (a database that takes long to stop) gives a lease
// span above 1 h. Every record the node writes then carries
// lease_span_ms above maxLeaseSpanMS, and Decode (and unitrec, for the
// unit keys) refuses the node's own records as garbage.
func TestSecDerivedLeaseSpanAboveDecodeLimit(t *testing.T) {
	tm := policy.DefaultTiming()
	tm.StopWait = time.Hour
	r, err := tm.Resolved()
	if err != nil {
		return // refused: fine
	}
	rec := policy.Record{Present: true, Holder: "node-a", Version: 7, Token: strings.Repeat("a", 32), LeaseSpan: r.LeaseSpan}
	if _, err := Decode("k", Encode(rec)); err != nil {
		t.Errorf("a valid timing (stop_wait 1h) resolves to lease span %v, and the records written with it are refused: %v", r.LeaseSpan, err)
	}
}

// TestSecDerivedLeaseSpanInRedis: the same through the scripts: the
// node's own acquisition comes back as garbage.
func TestSecDerivedLeaseSpanInRedis(t *testing.T) {
	tm := policy.DefaultTiming()
	tm.StopWait = time.Hour
	r, err := tm.Resolved()
	if err != nil {
		return
	}
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a", func(c *Config) { c.LeaseSpan = r.LeaseSpan })
	if _, err := a.Acquire(bg, "db", policy.Record{}); err != nil {
		t.Errorf("lease span %v (derived from a valid timing): acquire: %v", r.LeaseSpan, err)
	}
	if _, err := a.Observe(bg, "db"); err != nil {
		t.Errorf("lease span %v: observe after the node's own acquisition: %v", r.LeaseSpan, err)
	}
}
