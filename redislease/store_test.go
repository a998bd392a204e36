package redislease

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

var bg = context.Background()

func newStore(t testing.TB, srv *redistest.Server, node string, mod ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{URL: srv.URL(), KeyPrefix: "unitlease:", Node: node, ReplyMax: 2 * time.Second, LeaseSpan: 37 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustObserve(t testing.TB, s *Store, name string) policy.Record {
	t.Helper()
	o, err := s.Observe(bg, name)
	if err != nil {
		t.Fatalf("observe %s: %v", name, err)
	}
	return o
}

// serverMillis is the server's clock in milliseconds (TIME), which an
// acquisition's version is at least.
func serverMillis(t testing.TB, srv *redistest.Server) uint64 {
	t.Helper()
	f := strings.Fields(srv.Command("TIME"))
	if len(f) != 2 {
		t.Fatalf("TIME: %q", f)
	}
	sec, err1 := strconv.ParseUint(f[0], 10, 64)
	usec, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME: %q", f)
	}
	return sec*1000 + usec/1000
}

func mustAcquire(t testing.TB, s *Store, name string) policy.Record {
	t.Helper()
	l, err := s.Acquire(bg, name, mustObserve(t, s, name))
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return l
}

func TestAcquireRenewRelease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")

	seen := mustObserve(t, a, "vpn")
	if seen.Present {
		t.Fatalf("fresh key observed as %q", seen.Raw)
	}
	before := serverMillis(t, srv)
	l, err := a.Acquire(bg, "vpn", seen)
	if err != nil {
		t.Fatal(err)
	}
	if l.Holder != "node-a" || l.Version <= before || l.Released || l.LeaseSpan != 37*time.Second {
		t.Fatalf("acquired %+v, want a version above the server's clock %d ms", l, before)
	}
	if got := srv.Command("GET", "unitlease:lease:vpn"); got != Encode(l) || got != l.Raw {
		t.Fatalf("stored %s, Encode gives %s, the record read back %s", got, Encode(l), l.Raw)
	}
	if ttl := srv.Command("PTTL", "unitlease:lease:vpn"); ttl < "8" || len(ttl) != 8 {
		t.Fatalf("PTTL %s, want about a day (86400000 ms)", ttl)
	}

	// A second acquire from the same observation loses the compare-and-set.
	var conflict *ConflictError
	if _, err := b.Acquire(bg, "vpn", seen); !errors.As(err, &conflict) || conflict.Current != l {
		t.Fatalf("acquire over a stale absence: %v", err)
	}

	l2, err := a.Renew(bg, "vpn", l)
	if err != nil || l2.Version != l.Version+1 || l2.Token != l.Token {
		t.Fatalf("renew: %+v %v", l2, err)
	}
	// Renewing the old version again is a loss: the version moved on.
	var lost *LostError
	if _, err := a.renew(bg, "vpn", nil, l); !errors.As(err, &lost) || lost.Current.Version != l2.Version {
		t.Fatalf("renew of a stale version: %v", err)
	}

	rel, err := a.Release(bg, "vpn", l2)
	if err != nil || !rel.Released || rel.Version != l2.Version+1 || rel.Holder != "node-a" {
		t.Fatalf("release: %+v %v", rel, err)
	}
	if _, err := a.Renew(bg, "vpn", l2); !errors.As(err, &lost) {
		t.Fatalf("renew after release: %v", err)
	}
	if _, err := a.Release(bg, "vpn", l2); !errors.Is(err, ErrLost) {
		t.Fatalf("second release: %v", err)
	}

	// A standby acquires over a released record at once.
	lb, err := b.Acquire(bg, "vpn", mustObserve(t, b, "vpn"))
	if err != nil || lb.Holder != "node-b" || lb.Version <= rel.Version {
		t.Fatalf("acquire over released: %+v %v", lb, err)
	}
	if lb.Token == l.Token {
		t.Fatal("token reused")
	}
}

func TestRenewAfterAnotherAcquired(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	la := mustAcquire(t, a, "db")
	// Say the key was lost and b took it over properly.
	srv.Command("DEL", "unitlease:lease:db")
	lb := mustAcquire(t, b, "db")
	_, err := a.Renew(bg, "db", la)
	var lost *LostError
	if !errors.As(err, &lost) || lost.Current.Holder != "node-b" || lost.Current.Version != lb.Version {
		t.Fatalf("renew after b acquired: %v", err)
	}
	if !strings.Contains(err.Error(), "held by node-b at version") {
		t.Fatalf("error does not say who holds it: %v", err)
	}
}

// A renewal whose reply was lost committed; the next renewal must not read
// that as a loss.
func TestRenewAfterUnansweredCommit(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	l := mustAcquire(t, a, "db")
	if _, err := a.Renew(bg, "db", l); err != nil { // its reply "never arrived"
		t.Fatal(err)
	}
	next, err := a.Renew(bg, "db", l)
	if err != nil || next.Version != l.Version+2 {
		t.Fatalf("renew from a version behind our own commit: %+v %v", next, err)
	}
}

func TestRenewMissingAndRestartWithoutPersistence(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	l := mustAcquire(t, a, "vpn")
	srv.Restart()
	if _, err := a.Renew(bg, "vpn", l); !errors.Is(err, ErrMissing) {
		t.Fatalf("renew after a restart without persistence: %v", err)
	}
	if _, err := a.Release(bg, "vpn", l); !errors.Is(err, ErrMissing) {
		t.Fatalf("release of a missing key: %v", err)
	}
	if o := mustObserve(t, a, "vpn"); o.Present {
		t.Fatalf("observed %q", o.Raw)
	}
	// Acquiring again continues above every version this node has seen,
	// so nobody sees the version go backwards.
	b := mustAcquire(t, a, "vpn")
	if b.Version <= l.Version {
		t.Fatalf("version after data loss: %d, want above %d", b.Version, l.Version)
	}
}

func TestRestartWithAppendOnly(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	a := newStore(t, srv, "node-a")
	l, err := a.Renew(bg, "vpn", mustAcquire(t, a, "vpn"))
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart() // SIGKILL: only the fsynced AOF survives
	o := mustObserve(t, a, "vpn")
	if !o.Same(l) || o.Version != l.Version {
		t.Fatalf("after restart: %+v, want %+v", o, l)
	}
	// A new process: another run id, so another identity.
	if o.Server == "" || l.Server == "" || o.Server == l.Server {
		t.Fatalf("server identity before the restart %q, after %q: want two different ones", l.Server, o.Server)
	}
	if _, err := a.Renew(bg, "vpn", l); err != nil {
		t.Fatalf("renew after restart: %v", err)
	}
	if d := a.Durability(bg); d.CanLoseAcked {
		t.Fatalf("appendfsync always reported as lossy: %+v", d)
	}
}

func TestDurabilityWithoutAOF(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	d := newStore(t, srv, "node-a").Durability(bg)
	if !d.CanLoseAcked || d.AppendOnly != "no" || d.Role != "master" || !strings.Contains(strings.Join(d.Findings, " "), "appendonly is no") {
		t.Fatalf("%+v", d)
	}
	srv.Command("CONFIG", "SET", "appendonly", "yes")
	srv.Command("CONFIG", "SET", "appendfsync", "everysec")
	d = newStore(t, srv, "node-a").Durability(bg)
	if !d.CanLoseAcked || !strings.Contains(strings.Join(d.Findings, " "), "appendfsync is everysec") {
		t.Fatalf("%+v", d)
	}
}

func TestGarbageIsReportedNotOverwritten(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	for _, junk := range []string{
		"hello",
		`{"holder":"node-b","version":"7","token":"00000000000000000000000000000000","state":"held","lease_span_ms":1}`,
		`{"holder":"node-b","version":7.5,"token":"00000000000000000000000000000000","state":"held","lease_span_ms":1}`,
		`{"holder":"node-b","version":7,"token":"00000000000000000000000000000000","state":"gone","lease_span_ms":1}`,
	} {
		srv.Command("SET", "unitlease:lease:junk", junk)
		o, err := a.Observe(bg, "junk")
		var g *GarbageError
		if !errors.As(err, &g) || g.Key != "unitlease:lease:junk" || !strings.Contains(err.Error(), "unitlease:lease:junk") {
			t.Fatalf("observe %q: %v", junk, err)
		}
		if _, err := a.Acquire(bg, "junk", o); !errors.Is(err, ErrGarbage) {
			t.Fatalf("acquire over %q: %v", junk, err)
		}
		// Even a caller that skips the check is stopped by the script.
		if _, _, err := a.run(bg, acquireScript, "junk", nil, junk, "0", "node-a", strings.Repeat("a", 32), 0, 1000, "c", 1, ""); err != nil {
			t.Fatal(err)
		} else if got := srv.Command("GET", "unitlease:lease:junk"); got != junk {
			t.Fatalf("script overwrote garbage %q with %q", junk, got)
		}
	}
	o, _ := a.Observe(bg, "junk")
	rec, err := a.Overwrite(bg, "junk", o)
	if err != nil || !rec.Released {
		t.Fatalf("operator overwrite: %+v %v", rec, err)
	}
	if _, err := a.Acquire(bg, "junk", mustObserve(t, a, "junk")); err != nil {
		t.Fatalf("acquire after overwrite: %v", err)
	}
}

// TestVersionGoingBackwardsIsAValue: a store that rolled back shows an
// older version; it is a value like any other (a standby ages it), never
// garbage, and an acquisition over it writes a version above every one
// the lost tenure wrote, whether or not the acquiring node saw them, and
// above every one this node has seen: the version stays a fencing token.
func TestVersionGoingBackwardsIsAValue(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	l := mustAcquire(t, a, "vpn")
	for range 3 {
		l, _ = a.Renew(bg, "vpn", l)
	}
	// The rollback loses node-a's tenure: the key holds an earlier
	// tenure's released record, below every version node-a wrote.
	old := l
	old.Holder, old.Version, old.Released = "node-z", 2, true
	srv.Command("SET", "unitlease:lease:vpn", Encode(old))
	o, err := a.Observe(bg, "vpn")
	if err != nil || o.Version != 2 || o.Raw != Encode(old) {
		t.Fatalf("observe an older version: %+v, %v; want version 2 and no error", o, err)
	}
	// node-b never saw node-a's versions: the server's clock puts its
	// acquisition above them all the same.
	b := newStore(t, srv, "node-b")
	n, err := b.Acquire(bg, "vpn", mustObserve(t, b, "vpn"))
	if err != nil || n.Version <= l.Version {
		t.Fatalf("acquire over the rolled-back record: %+v, %v; want a version above the lost %d", n, err, l.Version)
	}
	// A node that saw a version above the clock (a server whose clock
	// was ahead) acquires above that too.
	srv.Command("SET", "unitlease:lease:vpn", Encode(old))
	c := newStore(t, srv, "node-c")
	c.floor["vpn"] = n.Version + 1_000_000
	m, err := c.Acquire(bg, "vpn", mustObserve(t, c, "vpn"))
	if err != nil || m.Version != n.Version+1_000_001 {
		t.Fatalf("acquire with a floor above the clock: %+v, %v; want version %d", m, err, n.Version+1_000_001)
	}
	// reset, from a node that saw nothing (the operator's fresh command),
	// over the rolled-back record: its released record is above every
	// version the lost tenures wrote, so standbys take it as news.
	srv.Command("SET", "unitlease:lease:vpn", Encode(old))
	d := newStore(t, srv, "node-d")
	r, err := d.Overwrite(bg, "vpn", mustObserve(t, d, "vpn"))
	if err != nil || !r.Released || r.Version <= n.Version {
		t.Fatalf("reset over the rolled-back record: %+v, %v; want a released record above version %d", r, err, n.Version)
	}
}

// Two contenders race for the same observed value, 10,000 times: exactly
// one wins each round and the version rises.
func TestRacingAcquireOneWinner(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	stores := []*Store{newStore(t, srv, "node-a"), newStore(t, srv, "node-b")}
	const rounds = 10_000
	var version, last uint64
	for round := range rounds {
		var wg sync.WaitGroup
		results := make([]error, 2)
		won := make([]policy.Record, 2)
		seen := []policy.Record{mustObserve(t, stores[0], "race"), mustObserve(t, stores[1], "race")}
		for i, s := range stores {
			wg.Go(func() { won[i], results[i] = s.Acquire(bg, "race", seen[i]) })
		}
		wg.Wait()
		winners := 0
		for i, err := range results {
			switch {
			case err == nil:
				winners++
				version = won[i].Version
			case !errors.Is(err, ErrConflict):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners (%v)", round, winners, results)
		}
		if version <= last {
			t.Fatalf("round %d: version %d, not above %d", round, version, last)
		}
		last = version
	}
}

func TestPasswordFileAndACL(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Config: []string{ACL("unitlease", "s3cret-pw", "unitlease:")}})
	dir := t.TempDir()
	pw := filepath.Join(dir, "redis.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withUser := func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw }
	_, err := New(Config{URL: srv.URL(), Node: "node-a", ReplyMax: time.Second, LeaseSpan: time.Minute, Username: "unitlease", PasswordFile: pw})
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "mode 0644 lets group or others read or change it") {
		t.Fatalf("loose password file: %v", err)
	}
	if err := os.Chmod(pw, 0o600); err != nil {
		t.Fatal(err)
	}
	a, b := newStore(t, srv, "node-a", withUser), newStore(t, srv, "node-b", withUser)
	wakes := a.Wakeups(t.Context(), []string{"vpn"})
	waitWake(t, wakes, Wake{Resync: true})
	if n, err := b.Watchers(bg, "vpn"); err != nil || n != 1 {
		t.Fatalf("watchers under the ACL: %d %v", n, err)
	}
	l := mustAcquire(t, a, "vpn")
	waitWake(t, wakes, Wake{Lease: "vpn"})
	l, err = a.Renew(bg, "vpn", l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Release(bg, "vpn", l); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, b, "vpn")
	// clear's word to every watcher to forget the lease's failures.
	if n, err := b.ClearFailures(bg, "vpn"); err != nil || n != 1 {
		t.Fatalf("clear failures under the ACL: heard by %d, %v", n, err)
	}
	waitWake(t, wakes, Wake{Lease: "vpn", ClearFailures: true})
	// disable and enable under the ACL (enable deletes the marker).
	if _, err := b.Disable(bg, "vpn"); err != nil {
		t.Fatalf("disable under the ACL: %v", err)
	}
	if was, err := b.Enable(bg, "vpn"); err != nil || !was {
		t.Fatalf("enable under the ACL: %t, %v", was, err)
	}
	if entries, err := a.List(bg); err != nil || len(entries) != 1 {
		t.Fatalf("list under the ACL: %v %v", entries, err)
	}
	if d := a.Durability(bg); d.AppendOnly != "no" || !d.CanLoseAcked {
		t.Fatalf("durability under the ACL: %+v", d)
	}
	// The user reads no configuration: CONFIG GET would show the default
	// user's password (requirepass) and masterauth.
	for _, param := range []string{"requirepass", "masterauth", "*"} {
		if _, err := a.rdb.ConfigGet(bg, param).Result(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("CONFIG GET %s as the unitlease user: %v, want NOPERM", param, err)
		}
	}
	srv.Command("CONFIG", "SET", "appendonly", "yes")
	if d := a.Durability(bg); d.AppendOnly != "yes" || !d.CanLoseAcked ||
		!strings.Contains(strings.Join(d.Findings, " "), "appendfsync is not readable by this Redis user") {
		t.Fatalf("durability under the ACL with appendonly: %+v", d)
	}
	// The user can touch nothing outside its prefix.
	if _, err := a.rdb.Set(bg, "other:key", "x", 0).Result(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("SET outside the prefix: %v", err)
	}
	if _, err := a.rdb.FlushAll(bg).Result(); err == nil {
		t.Fatal("FLUSHALL allowed")
	}
	// A wrong password is refused.
	if err := os.WriteFile(pw, []byte("wrong\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := newStore(t, srv, "node-c", withUser).Ping(bg); err == nil {
		t.Fatal("wrong password accepted")
	}
}

func TestConfigErrors(t *testing.T) {
	base := Config{URL: "redis://127.0.0.1:1/0", Node: "n", ReplyMax: time.Second, LeaseSpan: time.Minute}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.URL = "redis://u:hunter2@127.0.0.1:1/0" }, "put it in password_file"},
		{func(c *Config) { c.URL = "http://x" }, "url:"},
		{func(c *Config) { c.Node = "bad node" }, `node name "bad node"`},
		{func(c *Config) { c.CAFile = "/x" }, "need a rediss:// url"},
		{func(c *Config) { c.URL, c.CertFile = "rediss://127.0.0.1:1/0", "/x" }, "go together"},
		{func(c *Config) { c.PasswordFile = "/nonexistent" }, "password_file"},
		{func(c *Config) { c.ReplyMax = 0 }, "must be positive"},
		{func(c *Config) { c.URL = "redis://127.0.0.1:26379/0?master_name=mymaster" }, "Sentinel is not configured through the URL"},
		{func(c *Config) { c.URL = "redis+sentinel://127.0.0.1:26379/mymaster" }, "Sentinel is not configured through the URL"},
		{func(c *Config) { c.URL = "redis://127.0.0.1:7000/0?addr=127.0.0.1:7001" }, "(Redis Cluster) are not supported"},
	} {
		cfg := base
		c.mod(&cfg)
		_, err := New(cfg)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
}

func TestWakeupsAfterRedisRestart(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	wakes := b.Wakeups(t.Context(), []string{"vpn", "db"})
	waitWake(t, wakes, Wake{Resync: true})
	if n, _ := a.Watchers(bg, "db"); n != 1 {
		t.Fatalf("watchers of db: %d, want 1", n)
	}
	if n, _ := a.Watchers(bg, "other"); n != 0 {
		t.Fatalf("watchers of other: %d, want 0", n)
	}
	l := mustAcquire(t, a, "vpn")
	waitWake(t, wakes, Wake{Lease: "vpn"})
	if _, err := a.Release(bg, "vpn", l); err != nil {
		t.Fatal(err)
	}
	waitWake(t, wakes, Wake{Lease: "vpn"})
	srv.Restart()
	waitWake(t, wakes, Wake{Resync: true})
	mustAcquire(t, a, "db")
	waitWake(t, wakes, Wake{Lease: "db"})
}

// waitWake fails the test if want does not arrive; the deadline only turns
// a hang into a failure.
func waitWake(t *testing.T, wakes <-chan Wake, want Wake) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case w := <-wakes:
			if w == want {
				return
			}
		case <-deadline:
			t.Fatalf("no wake-up %+v", want)
		}
	}
}

func TestList(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	for i := range 3 {
		mustAcquire(t, a, fmt.Sprintf("l%d", i))
	}
	srv.Command("SET", "unitlease:lease:zz", "junk")
	srv.Command("SET", "other:lease:x", "not ours")
	entries, err := a.List(bg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "l0,l1,l2,zz" || entries[0].Record.Holder != "node-a" || !errors.Is(entries[3].Err, ErrGarbage) {
		t.Fatalf("list: %+v", entries)
	}
}

// TestOddValuesAreGarbageReadByTheirHead: a value of megabytes in a
// lease key, or a key of another type (a list another client wrote), is
// garbage known by its type, length and first bytes, on every read: a
// standby's Observe (alone or with unit keys) never reads it whole (a
// 200 MB value outlasted every timeout and would hold the daemon's
// memory), and `reset` replaces it the same way (before, a list could not
// be reset at all, and MGET read it as a missing key). All under the
// documented ACL user. One that changed since it was read is left alone.
func TestOddValuesAreGarbageReadByTheirHead(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Config: []string{ACL("unitlease", "s3cret-pw", "unitlease:")}})
	pw := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, srv, "node-a", func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw })
	srv.Command("SETRANGE", "unitlease:lease:vpn", strconv.Itoa(8<<20), "x") // 8 MiB of zeros and an x
	srv.Command("RPUSH", "unitlease:lease:db", "x")
	srv.Command("HSET", "unitlease:unit:web.service", "x", "y")

	for _, c := range []struct {
		lease  string
		units  []string
		key    string
		reason string
	}{
		{"vpn", nil, "unitlease:lease:vpn", "8388609 bytes, more than any record"},
		{"vpn", []string{"vpn.service"}, "unitlease:lease:vpn", "8388609 bytes, more than any record"},
		{"db", nil, "unitlease:lease:db", "a Redis list, not a string"},
		{"db", []string{"db.service"}, "unitlease:lease:db", "a Redis list, not a string"},
		{"web", []string{"web.service"}, "unitlease:unit:web.service", "a Redis hash, not a string"},
	} {
		rec, err := a.ObserveUnits(bg, c.lease, c.units)
		var g *GarbageError
		if !errors.As(err, &g) || g.Key != c.key || !strings.Contains(g.Reason, c.reason) {
			t.Errorf("observe %s with units %v: %v, want garbage at %s: %s", c.lease, c.units, err, c.key, c.reason)
			continue
		}
		if !rec.Present || rec.Version != 0 || len(rec.Raw) > 200 {
			t.Errorf("observe %s: %+v, want a present record that is no record, and short", c.lease, rec)
		}
		if _, err := a.AcquireUnits(bg, c.lease, c.units, rec); !errors.Is(err, ErrGarbage) {
			t.Errorf("acquire %s over it: %v, want refused as garbage", c.lease, err)
		}
	}

	odd, err := a.OddValue(bg, "vpn")
	if err != nil || odd == nil || odd.Type != "string" || odd.Size != 8<<20+1 || odd.Head != strings.Repeat("\x00", 64) {
		t.Fatalf("OddValue of 8 MiB: %+v %v", odd, err)
	}
	if none, err := a.OddValue(bg, "none"); err != nil || none != nil {
		t.Fatalf("OddValue of a missing key: %+v %v", none, err)
	}
	changed := *odd
	changed.Size++
	if _, err := a.OverwriteOdd(bg, "vpn", &changed); !errors.Is(err, ErrConflict) {
		t.Fatalf("overwrite of a value that changed: %v", err)
	}
	rec, err := a.OverwriteOdd(bg, "vpn", odd)
	if err != nil || !rec.Released || rec.Holder != "node-a" {
		t.Fatalf("overwrite: %+v %v", rec, err)
	}
	if got := mustObserve(t, a, "vpn"); !got.Same(rec) {
		t.Fatalf("the key now holds %+v", got)
	}

	list, err := a.OddValue(bg, "db")
	if err != nil || list == nil || list.Type != "list" {
		t.Fatalf("OddValue of a list: %+v %v", list, err)
	}
	srv.Command("DEL", "unitlease:lease:db")
	srv.Command("SADD", "unitlease:lease:db", "x")
	if _, err := a.OverwriteOdd(bg, "db", list); !errors.Is(err, ErrConflict) {
		t.Fatalf("overwrite of a list that became a set: %v", err)
	}
	set, _ := a.OddValue(bg, "db")
	if rec, err := a.OverwriteOdd(bg, "db", set); err != nil || !rec.Released {
		t.Fatalf("overwrite of a set: %+v %v", rec, err)
	}
}

// TestWakeupsEndWithTheirContext: a subscription ends when its context
// does: its channel closes and peers no longer count it as a watcher.
// go-redis's Receive does not return on a cancelled context (only on a
// deadline or a message), so every reload of the daemon left one
// subscription behind, and `handoff` counted watchers that were gone.
func TestWakeupsEndWithTheirContext(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	for round := range 3 {
		ctx, cancel := context.WithCancel(t.Context())
		wakes := b.Wakeups(ctx, []string{"vpn"})
		waitWake(t, wakes, Wake{Resync: true})
		if n, _ := a.Watchers(bg, "vpn"); n != 1 {
			t.Fatalf("round %d: watchers of vpn: %d, want 1 (every earlier subscription ended)", round, n)
		}
		cancel()
		closed := time.After(10 * time.Second) // turns a hang into a failure
		for open := true; open; {
			select {
			case _, open = <-wakes:
			case <-closed:
				t.Fatalf("round %d: the wake-ups channel is still open after its context ended", round)
			}
		}
	}
	// The server drops a closed connection's subscriptions once it reads
	// the close; the count reaches 0 with no subscription left.
	for i, n := 0, 1; n != 0; i++ {
		if i == 100000 {
			t.Fatalf("watchers of vpn: still %d", n)
		}
		var err error
		if n, err = a.Watchers(bg, "vpn"); err != nil {
			t.Fatal(err)
		}
		if n > 1 {
			t.Fatalf("watchers of vpn: %d after every subscription ended", n)
		}
		runtime.Gosched()
	}
}

func TestMaxValueLua(t *testing.T) {
	if maxValueLua != strconv.Itoa(MaxValue) {
		t.Fatalf("the scripts read up to %s bytes, Go up to %d", maxValueLua, MaxValue)
	}
}
