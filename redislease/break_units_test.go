package redislease

import (
	"errors"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
)

// Adversarial probes of unit keys that the store withstood.

// Lease and unit names that look like keys or need escaping: a lease
// named "unit:db.service" (its key is not db.service's unit key), a lease
// name ending in a backslash, a unit with systemd's \x2d escape. Each
// lease's unit key is written and read back under its own name, another
// lease ages it and acquires over exactly it, and nothing collides.
func TestBreakOddNamesDoNotCollide(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	for _, tc := range []struct{ lease, other, unit string }{
		{"unit:db.service", "lease:B", "db.service"},
		{`a\`, `b\\c`, `foo\x2dbar.service`},
		{"x:y@z", "unit:", "lease:x.service"},
	} {
		units := []string{tc.unit}
		la := acquireUnits(t, a, tc.lease, units)
		if got := srv.Command("GET", "unitlease:lease:"+tc.lease); got != la.Raw {
			t.Fatalf("lease %q's key holds %q, want its record", tc.lease, got)
		}
		if got, want := unitKey(srv, tc.unit), EncodeUnit(tc.lease, la); got != want {
			t.Fatalf("unit %q's key holds %q, want %q", tc.unit, got, want)
		}
		o := observeUnits(t, b, tc.other, units)
		if otherOf(o).Lease != tc.lease || otherOf(o).Unit != tc.unit || o.Holder != "node-a" {
			t.Fatalf("lease %q observes %+v (%+v), want %q's record of %q", tc.other, o, otherOf(o), tc.lease, tc.unit)
		}
		// The holder's own observation is its own record, not another lease's.
		if mine := observeUnits(t, a, tc.lease, units); mine.Other != nil || !mine.Same(la) {
			t.Fatalf("lease %q observes itself as %+v", tc.lease, mine)
		}
		lb, err := b.AcquireUnits(bg, tc.other, units, o)
		if err != nil {
			t.Fatalf("lease %q over the aged record of %q: %v", tc.other, tc.lease, err)
		}
		if got, want := unitKey(srv, tc.unit), EncodeUnit(tc.other, lb); got != want {
			t.Fatalf("unit %q's key holds %q, want %q", tc.unit, got, want)
		}
		if _, err := a.RenewUnits(bg, tc.lease, units, la); !errors.Is(err, ErrLost) {
			t.Fatalf("renewal of %q after %q claimed %q: %v", tc.lease, tc.other, tc.unit, err)
		}
	}
}

// A unit moving A -> B -> A quickly: every stale observation is refused,
// each step's acquisition over exactly what it saw succeeds, and the unit
// key always names the lease that holds the unit.
func TestBreakUnitMovesBackAndForth(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	la := acquireUnits(t, a, "A", dbUnit)
	staleA := observeUnits(t, a, "A", dbUnit) // A's own record, held
	rel, err := a.ReleaseUnits(bg, "A", dbUnit, la)
	if err != nil {
		t.Fatal(err)
	}
	oldB := observeUnits(t, b, "B", dbUnit) // B missing, db.service released by A
	if oldB.Other == nil || !oldB.Other.Released {
		t.Fatalf("B observes %+v, want A's released record of db.service", oldB)
	}
	lb, err := b.AcquireUnits(bg, "B", dbUnit, oldB)
	if err != nil {
		t.Fatal(err)
	}
	// A's standby acquires over A's released record: db.service is B's now.
	oa := observeUnits(t, a, "A", dbUnit)
	if otherOf(oa).Lease != "B" {
		t.Fatalf("A observes %+v, want B's record", oa)
	}
	relA, err := Decode("", rel.Raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireUnits(bg, "A", dbUnit, relA); !errors.Is(err, ErrClaimed) {
		t.Fatalf("A over its released record while B holds db.service: %v", err)
	}
	if _, err := a.AcquireUnits(bg, "A", dbUnit, staleA); !errors.Is(err, ErrConflict) {
		t.Fatalf("A over a stale observation of itself: %v", err)
	}
	// B gives it back; A acquires over exactly what it sees.
	if _, err := b.ReleaseUnits(bg, "B", dbUnit, lb); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireUnits(bg, "A", dbUnit, oa); !errors.Is(err, ErrClaimed) {
		t.Fatalf("A over B's record, released since: %v", err)
	}
	la2 := acquireUnits(t, a, "A", dbUnit)
	if got, want := unitKey(srv, "db.service"), EncodeUnit("A", la2); got != want {
		t.Fatalf("db.service's key: %q, want %q", got, want)
	}
	// B's old observation of itself (missing) is refused twice over.
	if _, err := b.AcquireUnits(bg, "B", dbUnit, oldB); !errors.Is(err, ErrConflict) && !errors.Is(err, ErrClaimed) {
		t.Fatalf("B over its old observation: %v", err)
	}
	if _, err := b.RenewUnits(bg, "B", dbUnit, lb); !errors.Is(err, ErrLost) {
		t.Fatalf("B renews its released tenure: %v", err)
	}
}

// A standby of B whose own key holds a dead node's stale record (with
// another unit set) while lease A holds db.service: it ages A's record
// until A is released, then its own stale one, and acquires over that.
func TestBreakStaleOwnKeyAndUnitElsewhere(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b, dead := newStore(t, srv, "node-a"), newStore(t, srv, "node-b"), newStore(t, srv, "node-d")
	stale := acquireUnits(t, dead, "B", []string{"web.service"}) // node-d died holding B
	la := acquireUnits(t, a, "A", dbUnit)
	units := []string{"db.service", "web.service"}
	o := observeUnits(t, b, "B", units)
	if otherOf(o).Lease != "A" {
		t.Fatalf("B observes %+v, want A's record", o)
	}
	la, err := a.RenewUnits(bg, "A", dbUnit, la)
	if err != nil {
		t.Fatal(err)
	}
	if o2 := observeUnits(t, b, "B", units); o2.Same(o) {
		t.Fatal("A's renewal did not change B's observation")
	}
	if _, err := a.ReleaseUnits(bg, "A", dbUnit, la); err != nil {
		t.Fatal(err)
	}
	o = observeUnits(t, b, "B", units)
	if own, _, ok := parseComposite(o.Raw); o.Other == nil || !o.Other.Released || !ok || !own.Same(stale) {
		t.Fatalf("after A's release B observes %+v, want node-d's stale record with A's released record of db.service", o)
	}
	lb, err := b.AcquireUnits(bg, "B", units, o)
	if err != nil || lb.Version <= stale.Version {
		t.Fatalf("B over node-d's stale record: %+v %v", lb, err)
	}
	for _, u := range units {
		if got, want := unitKey(srv, u), EncodeUnit("B", lb); got != want {
			t.Fatalf("%s's key: %q, want %q", u, got, want)
		}
	}
}
