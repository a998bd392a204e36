package redislease

import (
	"errors"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// A holder whose stop failed renews its record as stop_failed, with its
// unit keys; no acquisition goes over it, of its own key or of another
// lease naming its unit, even one that saw exactly that value; its holder
// may still release it once a stop succeeds.
func TestStopFailedRecordBlocksAcquisition(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	b := newStore(t, srv, "node-b")
	l := acquireUnits(t, a, "A", dbUnit)
	held := l
	held.StopFailed = true
	l2, err := a.RenewUnits(bg, "A", dbUnit, held)
	if err != nil {
		t.Fatal(err)
	}
	if !l2.StopFailed || StateOf(l2) != StateStopFailed || unitKey(srv, "db.service") != EncodeUnit("A", l2) {
		t.Fatalf("renewed as %+v (unit key %q), want stop_failed in both", l2, unitKey(srv, "db.service"))
	}
	seen := mustObserve(t, b, "A")
	if !seen.StopFailed || !seen.Same(l2) {
		t.Fatalf("observed %+v, want the stop_failed record", seen)
	}
	if _, err := b.Acquire(bg, "A", seen); !errors.As(err, new(*ConflictError)) {
		t.Fatalf("acquire over the stop_failed record: %v, want a conflict", err)
	}
	other := observeUnits(t, b, "B", dbUnit)
	if other.Other == nil || !other.StopFailed {
		t.Fatalf("B's observation %+v does not report A's stop_failed record of db.service", other)
	}
	if _, err := b.AcquireUnits(bg, "B", dbUnit, other); !errors.Is(err, ErrClaimed) {
		t.Fatalf("acquire B over A's stop_failed unit key: %v, want ErrClaimed", err)
	}
	// Renewed as stop_failed again, then released once the stop worked.
	l3, err := a.RenewUnits(bg, "A", dbUnit, l2)
	if err != nil || !l3.StopFailed {
		t.Fatalf("second renewal: %+v, %v", l3, err)
	}
	rel, err := a.ReleaseUnits(bg, "A", dbUnit, l3)
	if err != nil || !rel.Released {
		t.Fatalf("release from stop_failed: %+v, %v", rel, err)
	}
	if _, err := b.AcquireUnits(bg, "B", dbUnit, observeUnits(t, b, "B", dbUnit)); err != nil {
		t.Fatalf("acquire B once A released: %v", err)
	}
}

// Clear replaces exactly a stop_failed record, and the unit keys that
// mirror it, with a released record; it refuses any other state.
func TestClearReleasesAStopFailedRecord(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	op := newStore(t, srv, "node-c")
	units := []string{"db.service", "web.service"}
	l := acquireUnits(t, a, "A", units)
	if _, _, _, err := op.Clear(bg, "A"); !errors.Is(err, ErrNotStopFailed) {
		t.Fatalf("clear of a held record: %v, want ErrNotStopFailed", err)
	}
	if _, _, _, err := op.Clear(bg, "nothing"); err == nil {
		t.Fatal("clear of a missing key succeeded")
	}
	held := l
	held.StopFailed = true
	blocked, err := a.RenewUnits(bg, "A", units, held)
	if err != nil {
		t.Fatal(err)
	}
	// Another lease claims web.service meanwhile? It cannot: the unit key
	// is live. An unrelated unit key of another lease stays as it is.
	c := acquireUnits(t, newStore(t, srv, "node-d"), "C", []string{"cache.service"})
	was, now, cleared, err := op.Clear(bg, "A")
	if err != nil {
		t.Fatal(err)
	}
	if !was.Same(blocked) || !now.Released || now.Holder != "node-a" || now.Token != blocked.Token || now.Version != blocked.Version+1 {
		t.Fatalf("cleared %+v into %+v", was, now)
	}
	if len(cleared) != 2 || cleared[0] != "db.service" || cleared[1] != "web.service" {
		t.Fatalf("cleared unit keys %v, want db.service and web.service", cleared)
	}
	for _, u := range units {
		if got, want := unitKey(srv, u), EncodeUnit("A", now); got != want {
			t.Fatalf("%s's key after clear: %q, want %q", u, got, want)
		}
	}
	if got := unitKey(srv, "cache.service"); got != EncodeUnit("C", c) {
		t.Fatalf("another lease's unit key changed: %q", got)
	}
	// The old holder's next renewal is a loss: the operator's word stands.
	if _, err := a.RenewUnits(bg, "A", units, blocked); !errors.As(err, new(*LostError)) {
		t.Fatalf("renewal after the clear: %v, want lost", err)
	}
	if _, _, _, err := op.Clear(bg, "A"); !errors.Is(err, ErrNotStopFailed) {
		t.Fatalf("a second clear: %v, want ErrNotStopFailed", err)
	}
}

// A record written stop_failed decodes as such, in Go as in the scripts.
func TestStopFailedDecodes(t *testing.T) {
	r := policy.Record{Present: true, Holder: "node-a", Token: "0123456789abcdef0123456789abcdef", Version: 4, StopFailed: true}
	raw := Encode(r)
	got, err := Decode("k", raw)
	if err != nil || !got.StopFailed || got.Released || StateOf(got) != StateStopFailed {
		t.Fatalf("Decode(%s) = %+v, %v", raw, got, err)
	}
	if _, err := DecodeUnit("k", "db.service", EncodeUnit("A", got)); err != nil {
		t.Fatalf("a stop_failed unit key: %v", err)
	}
}
