package redislease

import (
	"errors"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// Probes of what a refused release reports (LostError.Current), which the
// policy now adopts and releases again when it Extends the record the
// release compared against. All hold.

// TestBreakReleaseLostCurrentIsTheFullRecord: a stop_failed renewal of a
// lease with a unit commits but its reply is "lost" (the caller keeps the
// record before it); the release over that older record is refused with a
// *LostError whose Current is the whole decoded record (holder, token,
// version, stop_failed, the server's identity), which Extends the old one;
// a release over Current then writes released into the lease key and the
// unit key, with the Next given, and another node acquires at once.
func TestBreakReleaseLostCurrentIsTheFullRecord(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	b := newStore(t, srv, "node-b")
	held := acquireUnits(t, a, "A", dbUnit)
	sf := held
	sf.StopFailed = true
	committed, err := a.RenewUnits(bg, "A", dbUnit, sf) // its reply is lost: held stays
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.ReleaseUnits(bg, "A", dbUnit, held)
	var lost *LostError
	if !errors.As(err, &lost) {
		t.Fatalf("release over the older version: %v, want a *LostError", err)
	}
	cur := lost.Current
	if !cur.Same(committed) || !cur.Extends(held) || !cur.StopFailed || cur.Token != held.Token || cur.Holder != "node-a" ||
		cur.Version != committed.Version || cur.Server == "" || cur.Other != nil {
		t.Fatalf("LostError.Current %+v; want the committed stop_failed record %+v, extending %+v, with its server", cur, committed, held)
	}
	cur.Next = "node-b" // what the policy sends for a planned handoff
	rel, err := a.ReleaseUnits(bg, "A", dbUnit, cur)
	if err != nil || !rel.Released || rel.Next != "node-b" || rel.Version != cur.Version+1 || rel.Token != held.Token {
		t.Fatalf("release over the adopted record: %+v, %v", rel, err)
	}
	if got := unitKey(srv, "db.service"); got != EncodeUnit("A", rel) {
		t.Fatalf("unit key %q after the release, want the released record", got)
	}
	if _, err := b.AcquireUnits(bg, "A", dbUnit, observeUnits(t, b, "A", dbUnit)); err != nil {
		t.Fatalf("node-b (named) acquires the released record: %v", err)
	}
}

// TestBreakReleaseLostCurrentNeverExtendsAnotherTenure: the records a
// refused release can find that are not this tenure's own later write
// never Extend the held record, so the policy never releases them: this
// node's own release already written (its reply lost), an operator's
// clear, this node's next tenure (same holder, new token), another node's
// acquisition over a release, and another node's `reset` (Overwrite).
func TestBreakReleaseLostCurrentNeverExtendsAnotherTenure(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	b := newStore(t, srv, "node-b")
	op := newStore(t, srv, "node-c")

	refused := func(t *testing.T, held policy.Record, what string) {
		t.Helper()
		_, err := a.Release(bg, "L", held)
		var lost *LostError
		if !errors.As(err, &lost) {
			t.Fatalf("%s: release %v, want a *LostError", what, err)
		}
		if lost.Current.Extends(held) {
			t.Fatalf("%s: Current %+v Extends the held %+v: the policy would release it", what, lost.Current, held)
		}
	}

	// 1. Own release already written (reply lost), then tried again.
	t1 := mustAcquire(t, a, "L")
	if _, err := a.Release(bg, "L", t1); err != nil {
		t.Fatal(err)
	}
	refused(t, t1, "own release already written")

	// 2. Next tenure of the same node: the old tenure's release is refused.
	t2 := mustAcquire(t, a, "L")
	if t2.Token == t1.Token {
		t.Fatal("two acquisitions share a token")
	}
	refused(t, t1, "same node, next tenure")

	// 3. Clear of this tenure's stop_failed record by an operator.
	sf := t2
	sf.StopFailed = true
	if _, err := a.Renew(bg, "L", sf); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := op.Clear(bg, "L"); err != nil {
		t.Fatal(err)
	}
	refused(t, t2, "operator's clear") // released, same holder and token

	// 4. Another node acquired over it.
	mustAcquire(t, b, "L")
	refused(t, t2, "another node's tenure")

	// 5. An operator's reset (Overwrite) of a record of this node.
	t3 := mustAcquire(t, a, "L")
	t3r, err := a.Renew(bg, "L", t3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := op.Overwrite(bg, "L", mustObserve(t, op, "L")); err != nil {
		t.Fatal(err)
	}
	refused(t, t3, "reset over the next version")
	refused(t, t3r, "reset over the current version")
}
