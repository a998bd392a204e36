package redislease

import (
	"errors"
	"strconv"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
)

// TestDisableAndEnable: `unitlease disable` writes a disabled record
// (no TTL) over the holder's: the holder's next renewal is a loss (it
// stops at once), no node acquires it, and disabling again keeps it.
// `enable` replaces it with a released record in the operator's name
// and a fresh token, which a standby acquires like any other. A
// stop_failed lease is not disabled (its units may still run), garbage
// neither, and enable refuses anything but a disabled record.
func TestDisableAndEnable(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b, op := newStore(t, srv, "node-a"), newStore(t, srv, "node-b"), newStore(t, srv, "node-op")
	held := mustAcquire(t, a, "vpn")

	dis, err := op.Disable(bg, "vpn")
	if err != nil || !dis.Disabled || dis.Holder != "node-op" || dis.Version <= held.Version {
		t.Fatalf("disable: %+v %v", dis, err)
	}
	if ttl := srv.Command("PTTL", "unitlease:lease:vpn"); ttl != "-1" {
		t.Errorf("a disabled record expires (PTTL %s): the lease would come back by itself", ttl)
	}
	if _, err := a.Renew(bg, "vpn", held); !errors.As(err, new(*LostError)) {
		t.Errorf("the holder's renewal over the disabled record: %v, want a loss", err)
	}
	seen := mustObserve(t, b, "vpn")
	if !seen.Disabled || StateOf(seen) != StateDisabled {
		t.Fatalf("observed %+v, want disabled", seen)
	}
	if _, err := b.Acquire(bg, "vpn", seen); !errors.Is(err, ErrConflict) {
		t.Errorf("acquire over the disabled record: %v, want a conflict", err)
	}
	if again, err := op.Disable(bg, "vpn"); err != nil || !again.Same(dis) {
		t.Errorf("disable again: %+v %v, want the same record", again, err)
	}

	en, err := op.Enable(bg, "vpn")
	if err != nil || !en.Released || en.Token == dis.Token || en.Version != dis.Version+1 {
		t.Fatalf("enable: %+v %v", en, err)
	}
	if ttl, _ := strconv.Atoi(srv.Command("PTTL", "unitlease:lease:vpn")); ttl <= 0 {
		t.Errorf("the enabled record has no TTL (%d)", ttl)
	}
	if _, err := op.Enable(bg, "vpn"); !errors.Is(err, ErrNotDisabled) {
		t.Errorf("enable of a released lease: %v, want ErrNotDisabled", err)
	}
	mustAcquire(t, b, "vpn")

	// Over nothing: disabled all the same (a lease not yet taken).
	if rec, err := op.Disable(bg, "db"); err != nil || !rec.Disabled {
		t.Errorf("disable of a missing key: %+v %v", rec, err)
	}
	// stop_failed: refused, and left as it is.
	l := mustAcquire(t, a, "web")
	l.StopFailed = true
	sf, err := a.Renew(bg, "web", l)
	if err != nil || !sf.StopFailed {
		t.Fatalf("stop_failed renewal: %+v %v", sf, err)
	}
	if _, err := op.Disable(bg, "web"); !errors.Is(err, ErrStopFailed) {
		t.Errorf("disable of a stop_failed lease: %v, want ErrStopFailed", err)
	}
	if now := mustObserve(t, op, "web"); !now.Same(sf) {
		t.Errorf("the stop_failed record became %+v", now)
	}
	srv.Command("SET", "unitlease:lease:junk", "not a record")
	if _, err := op.Disable(bg, "junk"); !errors.Is(err, ErrGarbage) {
		t.Errorf("disable over garbage: %v, want ErrGarbage", err)
	}
}
