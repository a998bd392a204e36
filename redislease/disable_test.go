package redislease

import (
	"errors"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
)

// TestDisableRefusesAcquisitionsUntilEnabled: against a real Redis, a
// disabled lease is acquired by nobody, over a released record or a
// missing key, with or without units, while its holder still renews and
// releases its own record as before (nothing of it is overwritten); the
// watchers hear both words; Enable lets the next acquisition through.
func TestDisableRefusesAcquisitionsUntilEnabled(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	wakes := b.Wakeups(t.Context(), []string{"vpn"})
	waitWake(t, wakes, Wake{Resync: true})
	held := mustAcquire(t, a, "vpn")

	if already, err := b.Disable(bg, "vpn"); err != nil || already {
		t.Fatalf("disable: already %t, %v", already, err)
	}
	waitWake(t, wakes, Wake{Lease: "vpn", Toggled: true})
	if already, err := a.Disable(bg, "vpn"); err != nil || !already {
		t.Fatalf("second disable: already %t, %v", already, err)
	}
	// The holder renews and releases its own record: the disable wrote
	// nothing over it.
	held, err := a.Renew(bg, "vpn", held)
	if err != nil {
		t.Fatalf("renewal of a disabled lease's record: %v", err)
	}
	rel, err := a.Release(bg, "vpn", held)
	if err != nil || rel.Holder != "node-a" || rel.Token != held.Token {
		t.Fatalf("release of a disabled lease: %+v, %v", rel, err)
	}
	for _, s := range []*Store{a, b} {
		if _, err := s.Acquire(bg, "vpn", mustObserve(t, s, "vpn")); !errors.Is(err, ErrDisabled) {
			t.Fatalf("%s acquired the disabled lease over its release: %v", s.node, err)
		}
	}
	if _, err := b.AcquireUnits(bg, "vpn", []string{"vpn.service"}, mustObserve(t, b, "vpn")); !errors.Is(err, ErrDisabled) {
		t.Fatalf("acquired the disabled lease with units: %v", err)
	}
	if _, err := b.Disable(bg, "db"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Acquire(bg, "db", mustObserve(t, b, "db")); !errors.Is(err, ErrDisabled) {
		t.Fatalf("acquired a disabled lease over a missing key: %v", err)
	}
	among, err := a.DisabledAmong(bg, []string{"vpn", "db", "web"})
	if err != nil || !among["vpn"] || !among["db"] || among["web"] {
		t.Fatalf("disabled among: %v, %v", among, err)
	}
	list, err := a.DisabledLeases(bg)
	if err != nil || len(list) != 2 || list[0].Lease != "db" || list[1].Lease != "vpn" || list[1].By != "node-b" || list[1].At.IsZero() {
		t.Fatalf("disabled leases: %+v, %v", list, err)
	}

	if was, err := a.Enable(bg, "vpn"); err != nil || !was {
		t.Fatalf("enable: was %t, %v", was, err)
	}
	waitWake(t, wakes, Wake{Lease: "vpn", Toggled: true})
	if was, err := a.Enable(bg, "vpn"); err != nil || was {
		t.Fatalf("second enable: was %t, %v", was, err)
	}
	if _, err := b.Acquire(bg, "vpn", mustObserve(t, b, "vpn")); err != nil {
		t.Fatalf("acquire after enable: %v", err)
	}
}
