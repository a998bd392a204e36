package redislease

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// TestEveryAnswerNamesItsServer: every record a store call returns (an
// observation, a missing key included, an acquisition, a renewal, a
// release, the current record of a loss or a conflict) carries the
// identity of the server that answered, read in the same pipeline; one
// server, one identity. A restart (a new process) is another identity,
// with or without its data.
func TestEveryAnswerNamesItsServer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	missing := mustObserve(t, a, "vpn")
	id := missing.Server
	if id == "" || missing.Present {
		t.Fatalf("observing a missing key: %+v, want it missing and the server named", missing)
	}
	l := mustAcquire(t, a, "vpn")
	r, err := a.Renew(bg, "vpn", l)
	if err != nil {
		t.Fatal(err)
	}
	o := mustObserve(t, b, "vpn")
	_, conflict := b.Acquire(bg, "vpn", missing)
	forged := r
	forged.Holder = "node-b"
	_, lost := b.Renew(bg, "vpn", forged)
	var c *ConflictError
	var lo *LostError
	if !errors.As(conflict, &c) || !errors.As(lost, &lo) {
		t.Fatalf("acquire over a stale value: %v; renew of another's record: %v", conflict, lost)
	}
	rel, err := a.Release(bg, "vpn", r)
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string]policy.Record{"acquisition": l, "renewal": r, "observation": o,
		"conflict's current record": c.Current, "loss's current record": lo.Current, "release": rel} {
		if got.Server != id {
			t.Errorf("%s names server %q, want %q", what, got.Server, id)
		}
	}
	srv.Restart()
	if after := mustObserve(t, a, "vpn"); after.Server == "" || after.Server == id || !after.Same(rel) {
		t.Fatalf("after a restart with the AOF: %+v; want the same record from another server than %q", after, id)
	}
}

// TestALeaderRidesThroughARollbackOfItsOwnRenewals: the store comes back
// from a restart with the leader's own earlier record (its last renewals
// lost): the leader's renewal writes over it, above the version it holds,
// and the answer names the new server. Another node's earlier record is a
// loss.
func TestALeaderRidesThroughARollbackOfItsOwnRenewals(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	a := newStore(t, srv, "node-a")
	first := mustAcquire(t, a, "vpn")
	l := first
	for range 3 {
		var err error
		if l, err = a.Renew(bg, "vpn", l); err != nil {
			t.Fatal(err)
		}
	}
	srv.Command("SET", "unitlease:lease:vpn", first.Raw) // what the rollback left
	srv.Restart()
	r, err := a.Renew(bg, "vpn", l)
	if err != nil {
		t.Fatalf("renewal over the leader's own earlier record (version %d, held %d): %v", first.Version, l.Version, err)
	}
	if r.Version != l.Version+1 || r.Token != l.Token || r.Server == l.Server {
		t.Fatalf("renewed %+v over %+v: want version %d, the same token, another server", r, l, l.Version+1)
	}

	// node-b's record from before node-a acquired: lost, nothing written.
	b := newStore(t, srv, "node-b")
	bl := mustAcquire(t, b, "db")
	al := bl
	al.Holder, al.Token = "node-a", first.Token
	other := bl.Raw
	if _, err := a.Renew(bg, "db", al); !errors.As(err, new(*LostError)) {
		t.Fatalf("renewal of a record that is another node's: %v, want a loss", err)
	}
	if got := srv.Command("GET", "unitlease:lease:db"); got != other {
		t.Fatalf("the loss wrote %q over %q", got, other)
	}
}

// TestAnAnswerFromAnUnknownServerIsAnError: a Redis user that may not run
// INFO cannot tell which server answered; every call fails (an
// observation is not a value, a write's outcome is unknown) with an error
// that says what the user needs, rather than pass records from an
// unknown server as trusted.
func TestAnAnswerFromAnUnknownServerIsAnError(t *testing.T) {
	noInfo := strings.Replace(ACL("unitlease", "s3cret-pw", "unitlease:"), " +info", "", 1)
	srv := redistest.Start(t, redistest.Options{Config: []string{noInfo}})
	pw := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, srv, "node-a", func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw })
	if o, err := a.Observe(bg, "vpn"); err == nil || !strings.Contains(err.Error(), "needs EVAL and INFO") {
		t.Fatalf("observe without INFO: %+v, %v; want an error naming INFO", o, err)
	}
	if _, err := a.Acquire(bg, "vpn", policy.Absent); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "needs EVAL and INFO") {
		t.Fatalf("acquire without INFO: %v; want ErrUnknown naming INFO", err)
	}
	// What run checks before it starts, and check reports.
	if err := a.Ping(bg); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("ping without INFO: %v; want ErrNoIdentity", err)
	}
}

// TestPingNeedsWhatAStandbyReads: a user with the previous release's ACL
// (no TYPE, STRLEN, GETRANGE) answers PING but cannot observe: Ping,
// which run and check call first, says so (ErrPermission), so the daemon
// refuses to start instead of running standbys that never see a lease.
func TestPingNeedsWhatAStandbyReads(t *testing.T) {
	old := strings.Replace(ACL("unitlease", "s3cret-pw", "unitlease:"), " +type +strlen +getrange", "", 1)
	srv := redistest.Start(t, redistest.Options{Config: []string{old}})
	pw := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, srv, "node-a", func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw })
	if err := a.Ping(bg); !errors.Is(err, ErrPermission) {
		t.Fatalf("ping with the old ACL: %v; want ErrPermission", err)
	}
	if _, err := a.Observe(bg, "vpn"); !errors.Is(err, ErrPermission) {
		t.Fatalf("observe with the old ACL: %v; want ErrPermission", err)
	}
}

// TestAWrongPasswordIsNamed: a server that refuses the password answers
// no command of the pipeline; the error is Redis's (WRONGPASS), not "the
// user needs EVAL and INFO", which sent operators to the ACL.
func TestAWrongPasswordIsNamed(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Config: []string{ACL("unitlease", "s3cret-pw", "unitlease:")}})
	pw := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pw, []byte("wrong-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, srv, "node-a", func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw })
	for what, err := range map[string]error{"ping": a.Ping(bg), "observe": func() error { _, err := a.Observe(bg, "vpn"); return err }()} {
		if err == nil || errors.Is(err, ErrNoIdentity) || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Errorf("%s with a wrong password: %v; want Redis's WRONGPASS", what, err)
		}
	}
}

// TestEverysecCrashLosesTheLastRenewals: with appendfsync everysec a
// crash may lose the last writes. The leader's next renewal finds its
// own earlier record under the restarted server's identity and renews
// over it, above every version it wrote before (the lost ones too).
func TestEverysecCrashLosesTheLastRenewals(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, Fsync: "everysec"})
	a := newStore(t, srv, "node-a")
	l := mustAcquire(t, a, "vpn")
	mark := srv.AOFEnd()
	r := l
	for range 3 {
		var err error
		if r, err = a.Renew(bg, "vpn", r); err != nil {
			t.Fatal(err)
		}
	}
	srv.CrashBackTo(mark)
	o := mustObserve(t, a, "vpn")
	if !o.Same(l) || o.Server == l.Server {
		t.Fatalf("after the crash: %+v, want %+v under another server", o, l)
	}
	n, err := a.Renew(bg, "vpn", r)
	if err != nil || n.Token != l.Token || n.Version != r.Version+1 {
		t.Fatalf("renewal over the leader's own earlier record: %+v, %v", n, err)
	}
}

// TestCrashLosesAnAcquisitionAfterARelease: a handoff, then a crash that
// keeps the release and loses the acquisition after it. The new holder's
// renewal finds the old holder's released record: a loss, and it stops.
func TestCrashLosesAnAcquisitionAfterARelease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true, Fsync: "everysec"})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	l := mustAcquire(t, a, "vpn")
	rel, err := a.Release(bg, "vpn", l)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := b.Acquire(bg, "vpn", mustObserve(t, b, "vpn"))
	if err != nil {
		t.Fatal(err)
	}
	cmds, marks := srv.AOFCommands()
	cut := redistest.AOFMark(-1)
	for i, c := range cmds {
		if len(c) >= 3 && strings.EqualFold(c[0], "SET") && c[2] == rel.Raw {
			cut = marks[i]
		}
	}
	if cut < 0 {
		t.Fatalf("no SET of the released record in the AOF: %q", cmds)
	}
	srv.CrashBackTo(cut)
	o := mustObserve(t, b, "vpn")
	if !o.Same(rel) || o.Server == lb.Server {
		t.Fatalf("after the crash: %+v, want the release %+v under another server", o, rel)
	}
	var lost *LostError
	if _, err := b.Renew(bg, "vpn", lb); !errors.As(err, &lost) || !lost.Current.Same(rel) {
		t.Fatalf("the lost holder's renewal: %v, want a loss to the released record", err)
	}
}
