package policy

import (
	"fmt"
	"testing"
	"time"
)

// elsewhere is what the store reports for this lease while one of its
// units is held under lease A by node b: A's record at version v, marked.
func elsewhere(v uint64, span time.Duration) Record {
	return Record{Present: true, Raw: fmt.Sprintf("-|db.service|A|b|%d", v), Holder: "b", Version: v,
		LeaseSpan: span, Other: &OtherLease{Lease: "A", Unit: "db.service"}}
}

// A standby ages another lease's record exactly like a record held by
// another node: every renewal of it restarts the age, it waits the longer
// of the two lease spans, and it acquires over exactly that record. It
// starts at once: the other lease's record never comes back, so no
// confirm wait is needed even though the lease's own key was missing.
func TestStandbyAgesAnotherLeasesRecordOfItsUnit(t *testing.T) {
	tm := DefaultTiming()
	span := tm.SafeMinimum()
	longer := span + 5*time.Second
	d := booted(t, tm)
	v := uint64(1)
	d.at(0, seen(elsewhere(v, longer))).want(Standby)
	// The other lease renews every 5 s: for ten lease spans, no acquire.
	for d.now < Instant(10*span) {
		d.wake().want(Standby, Observe)
		v = uint64(d.now/Instant(5*time.Second)) + 1
		d.after(0, seen(elsewhere(v, longer))).want(Standby)
	}
	// It stops changing: acquired once it stayed the same for the
	// writer's longer span, not before.
	last := d.now
	for {
		d.wake().want(Standby, Observe)
		d.after(0, seen(elsewhere(v, longer)))
		if d.m.Age(d.now) >= longer {
			break
		}
		d.want(Standby)
	}
	d.want(Acquiring, Acquire)
	if a := d.action(0); !a.Record.Same(elsewhere(v, longer)) {
		t.Fatalf("acquire over %v, want the other lease's record as observed", a.Record)
	}
	if got := d.now.Sub(last); got < longer {
		t.Fatalf("acquired %v after the other lease's last change, want at least %v", got, longer)
	}
	// Over another lease's record it confirms first, as over a missing
	// key: a standby with other units may be aging this lease's missing
	// key, and must read the new record before the unit starts.
	d.after(10*time.Millisecond, with(AcquireOK, held("a", 1))).want(Confirming).journal(JournalAcquired)
	for d.m.State() == Confirming {
		d.wake()
		if d.has(Renew) {
			d.after(10*time.Millisecond, with(RenewOK, held("a", 2)))
		}
	}
	d.want(Starting, StartUnit)
}

// An acquisition the store refused (the other lease's record changed, or
// another unit was claimed since) starts the age over.
func TestRefusedAcquisitionOverAnotherLeasesRecordStartsOver(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	r := elsewhere(3, 0)
	d.at(0, seen(r)).want(Standby)
	for d.m.Age(d.now) < tm.SafeMinimum() {
		d.wake().want(Standby, Observe)
		d.after(0, seen(r))
	}
	d.want(Acquiring, Acquire)
	d.after(10*time.Millisecond, ev(AcquireLost)).want(Standby, Observe)
	d.after(10*time.Millisecond, seen(r)).want(Standby)
	if d.m.Age(d.now) != 0 {
		t.Fatalf("age %v after a refused acquisition, want 0", d.m.Age(d.now))
	}
	if got := r.String(); got != "db.service held under lease A by b at version 3" {
		t.Fatalf("String: %q", got)
	}
}

func TestAnotherLeasesRecordNeverExtendsOurs(t *testing.T) {
	mine := held("a", 4)
	r := mine
	r.Version, r.Raw, r.Other = 5, "other", &OtherLease{Lease: "A", Unit: "db.service"}
	if r.Extends(mine) {
		t.Fatal("a record marked with another lease extends this node's own")
	}
}

// An acquisition that claimed a missing unit key confirms before it
// starts, as over a missing lease key: a standby of another lease naming
// that unit ages the same missing key, and a data loss would make it
// missing again. One that claimed nothing missing starts at once.
func TestFreshAcquisitionConfirms(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	r := held("a", 2)
	r.Fresh = true
	d.after(10*time.Millisecond, with(AcquireOK, r)).want(Confirming).journal(JournalAcquired)
	d = booted(t, DefaultTiming())
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.after(10*time.Millisecond, with(AcquireOK, held("a", 2))).want(Starting, StartUnit)
}
