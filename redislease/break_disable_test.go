package redislease

import (
	"errors"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
)

// TestBreakDisableMarkerOfAnyType: a marker that is not a string (an
// operator's `HSET`, a stray list) is a disable like any other for the
// acquire script (TYPE); the daemons' reading (DisabledAmong) and status
// (DisabledLeases) must agree, or the daemons announce the lease ready
// and compete for a lease the script refuses forever; enable removes it.
func TestBreakDisableMarkerOfAnyType(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	for _, cmd := range [][]string{
		{"HSET", a.DisabledKey("h"), "by", "x"},
		{"RPUSH", a.DisabledKey("l"), "x"},
		{"SET", a.DisabledKey("s"), ""},
	} {
		if out := srv.Command(cmd...); out == "" && cmd[0] != "SET" {
			t.Fatalf("%v: no reply", cmd)
		}
	}
	leases := []string{"h", "l", "s"}
	among, err := a.DisabledAmong(bg, leases)
	if err != nil {
		t.Fatal(err)
	}
	list, err := a.DisabledLeases(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		_, aerr := a.Acquire(bg, l, mustObserve(t, a, l))
		refused := errors.Is(aerr, ErrDisabled)
		listed := false
		for _, x := range list {
			listed = listed || x.Lease == l
		}
		if refused != among[l] || refused != listed {
			t.Errorf("marker of lease %s: acquire refused %v (%v), DisabledAmong %v, DisabledLeases lists it %v: they must agree",
				l, refused, aerr, among[l], listed)
		}
	}
	for _, l := range leases {
		if was, err := a.Enable(bg, l); err != nil || !was {
			t.Errorf("enable %s: was %v, %v", l, was, err)
		}
		if _, err := a.Acquire(bg, l, mustObserve(t, a, l)); err != nil {
			t.Errorf("acquire %s after enable: %v", l, err)
		}
	}
}

// TestBreakDisableSurvivesARestartWithAOF: with appendfsync always, the
// marker survives a Redis restart: after it, the acquisition is still
// refused. (Without persistence a restart loses the marker and the lease
// is enabled against the operator's word: documented in disable.go; the
// record is missing then too, so rule 4 and the confirm wait hold.)
func TestBreakDisableSurvivesARestartWithAOF(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	a := newStore(t, srv, "node-a")
	held := mustAcquire(t, a, "vpn")
	if _, err := a.Disable(bg, "vpn"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(bg, "vpn", held); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	b := newStore(t, srv, "node-b")
	if _, err := b.Acquire(bg, "vpn", mustObserve(t, b, "vpn")); !errors.Is(err, ErrDisabled) {
		t.Fatalf("after a restart with the AOF, the disabled lease was acquired: %v", err)
	}
}
