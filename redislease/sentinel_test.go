package redislease

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// sentinelStore is a store that finds its master through the sentinels.
func sentinelStore(t *testing.T, s *redistest.Sentinel, node string, mod ...func(*Config)) *Store {
	t.Helper()
	cfg := Config{Sentinels: s.Addrs(), MasterName: s.Name, KeyPrefix: "unitlease:", Node: node,
		ReplyMax: time.Second, LeaseSpan: 37 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// renewUntil renews until a renewal succeeds, as a leader does every
// retry until its renew_deadline; it fails the test on a loss, which
// would stop the unit. The limit bounds the harness, not the product.
func renewUntil(t *testing.T, s *Store, name string, held policy.Record) policy.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 20*time.Second)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		next, err := s.Renew(ctx, name, held)
		if err == nil {
			return next
		}
		if errors.Is(err, ErrLost) || errors.Is(err, ErrMissing) || errors.Is(err, ErrGarbage) {
			t.Fatalf("renewal across the failover: %v (a leader would stop its unit)", err)
		}
		last = err
	}
	t.Fatalf("no renewal succeeded within 20s: %v", last)
	return policy.Record{}
}

// TestSentinelLeaderRidesThroughFailover: a leader that renews through a
// Sentinel failover finds its own record on the promoted replica and
// renews over it, under the new server's identity; a standby sees that
// identity change on its next observation.
func TestSentinelLeaderRidesThroughFailover(t *testing.T) {
	dir := t.TempDir()
	pwFile, senFile := filepath.Join(dir, "pw"), filepath.Join(dir, "spw")
	for f, pw := range map[string]string{pwFile: "data-pw", senFile: "sentinel-pw"} {
		if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := redistest.StartSentinel(t, redistest.SentinelOptions{
		MinReplicas: 1, MaxLag: 2, Server: redistest.Options{Password: "data-pw"}, SentinelPassword: "sentinel-pw"})
	auth := func(c *Config) { c.PasswordFile, c.SentinelPasswordFile = pwFile, senFile }
	a, b := sentinelStore(t, s, "node-a", auth), sentinelStore(t, s, "node-b", auth)

	l := mustAcquire(t, a, "vpn")
	l = renewUntil(t, a, "vpn", l)
	seen := mustObserve(t, b, "vpn")
	if !seen.Same(l) || seen.Server != l.Server || l.Server == "" {
		t.Fatalf("standby saw %+v, leader holds %+v", seen, l)
	}
	// The record must be on the replicas before the failover, as it is
	// with a lease renewed every few seconds.
	s.Master().Command("WAIT", "2", "5000")

	old := s.Master()
	now := s.Failover()
	if now == old {
		t.Fatal("the failover kept the master")
	}
	r := renewUntil(t, a, "vpn", l)
	if r.Token != l.Token || r.Version <= l.Version || r.Server == l.Server {
		t.Fatalf("renewed %+v over %+v: want the same tenure, a higher version, another server", r, l)
	}
	// Until the standby's client learns of the switch it may still read
	// the old master, now a replica: the state it held at the switch
	// (writes there fail: READONLY). Then it reads the renewal, under
	// the new master's identity.
	// Observations may fail while its client drops the old connections.
	limit := time.Now().Add(20 * time.Second) // bounds the harness, not the product
	for {
		o, err := b.Observe(bg, "vpn")
		if err == nil && o.Same(r) && o.Server == r.Server {
			break
		}
		if time.Now().After(limit) {
			t.Fatalf("standby after the failover never saw %+v; last %+v, %v", r, o, err)
		}
	}
	if got := now.Command("GET", "unitlease:lease:vpn"); got != r.Raw {
		t.Fatalf("the new master holds %q, want the renewed record %q", got, r.Raw)
	}
}

// TestSentinelMasterKilled: the master dies; once the sentinels promote a
// replica the leader's renewals succeed there, over its own record.
func TestSentinelMasterKilled(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelOptions{MinReplicas: 1, MaxLag: 2})
	a := sentinelStore(t, s, "node-a")
	l := mustAcquire(t, a, "db")
	s.Master().Command("WAIT", "2", "5000")
	old := s.Master()
	old.Stop()
	s.AwaitNewMaster(old)
	r := renewUntil(t, a, "db", l)
	if r.Token != l.Token || r.Version != l.Version+1 || r.Server == l.Server {
		t.Fatalf("renewed %+v over %+v", r, l)
	}
}

// TestSentinelLaggingReplicaRollsBack: a failover to a replica that
// missed the newest writes shows the older record under a new identity;
// the leader whose renewals were lost renews over its own earlier record,
// and an acquisition there writes a version above every lost one.
func TestSentinelLaggingReplicaRollsBack(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelOptions{Replicas: 1})
	a, b := sentinelStore(t, s, "node-a"), sentinelStore(t, s, "node-b")
	l := mustAcquire(t, a, "vpn")
	s.Master().Command("WAIT", "1", "5000")
	// The replica stops copying: the renewals that follow are lost to it.
	replica := s.Servers[1]
	replica.Freeze()
	s.Master().Command("CLIENT", "KILL", "TYPE", "replica")
	r := l
	for range 3 {
		var err error
		if r, err = a.Renew(bg, "vpn", r); err != nil {
			t.Fatal(err)
		}
	}
	old := s.Master()
	old.Stop()
	replica.Thaw()
	s.AwaitNewMaster(old)

	o := mustObserve(t, b, "vpn")
	if !o.Present || o.Version >= r.Version || o.Server == r.Server {
		t.Fatalf("after the failover the standby saw %+v; want an earlier version than %d under another server", o, r.Version)
	}
	n := renewUntil(t, a, "vpn", r)
	if n.Token != l.Token || n.Server == r.Server {
		t.Fatalf("renewed %+v", n)
	}
	if _, err := b.Acquire(bg, "vpn", o); !errors.Is(err, ErrConflict) {
		t.Fatalf("acquire over the stale observation: %v", err)
	}
	// The lease released and acquired again: above every version written.
	rel, err := a.Release(bg, "vpn", n)
	if err != nil {
		t.Fatal(err)
	}
	nb, err := b.Acquire(bg, "vpn", mustObserve(t, b, "vpn"))
	if err != nil || nb.Version <= max(rel.Version, r.Version) {
		t.Fatalf("acquire after the rollback: %+v %v", nb, err)
	}
}

func TestSentinelConfig(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := Config{Sentinels: []string{"127.0.0.1:26379"}, MasterName: "m", KeyPrefix: "p:", Node: "n",
		ReplyMax: time.Second, LeaseSpan: 10 * time.Second}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.URL = "redis://127.0.0.1/0" }, "url and sentinels are alternatives"},
		{func(c *Config) { c.MasterName = "" }, "master_name: sentinels need the name of the master"},
		{func(c *Config) { c.Sentinels = []string{"127.0.0.1"} }, `sentinels: "127.0.0.1" is not host:port`},
		{func(c *Config) { c.Sentinels = []string{"h:99999"} }, `sentinels: "h:99999": port "99999" is not a port number`},
		{func(c *Config) { c.DB = -1 }, "db: -1 is not in 0..65535"},
		{func(c *Config) { c.CAFile = loose }, "ca_file, cert_file and key_file need tls = true"},
		{func(c *Config) { c.SentinelPasswordFile = loose }, "sentinel_password_file " + loose + ": mode 0644"},
		{func(c *Config) { c.Sentinels, c.URL = nil, "redis://h/0" }, "master_name, sentinel_username and sentinel_password_file need sentinels"},
		{func(c *Config) { c.Sentinels, c.MasterName, c.URL, c.TLS = nil, "", "redis://h/0", true }, "tls and db go with sentinels"},
		{func(c *Config) { c.Sentinels, c.MasterName, c.URL = nil, "", "redis://h/0?master_name=m" }, "set sentinels and master_name instead of url"},
	} {
		cfg := base
		c.mod(&cfg)
		err := cfg.Check()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, c.want)
		}
	}
	if err := base.Check(); err != nil {
		t.Fatalf("a good sentinel configuration: %v", err)
	}
}

// TestSentinelFailoverSettings reads the settings back from real servers
// and sentinels and judges them.
func TestSentinelFailoverSettings(t *testing.T) {
	s := redistest.StartSentinel(t, redistest.SentinelOptions{MinReplicas: 1, MaxLag: 2, DownAfter: 5 * time.Second})
	a := sentinelStore(t, s, "node-a")
	f, err := a.Failover(bg)
	if err != nil {
		t.Fatal(err)
	}
	want := Failover{MinReplicas: 1, MaxLag: 2 * time.Second, Replicas: 2, DownAfter: 5 * time.Second,
		FailoverTimeout: 3 * time.Second, Sentinels: 3, Known: 3, Quorum: 2}
	if f.MinReplicas != want.MinReplicas || f.MaxLag != want.MaxLag || f.Replicas != want.Replicas || f.DownAfter != want.DownAfter ||
		f.FailoverTimeout != want.FailoverTimeout || f.Sentinels != want.Sentinels || f.Known != want.Known || f.Quorum != want.Quorum || f.Unread != nil {
		t.Fatalf("read %+v, want %+v", f, want)
	}
	if p := f.Problems(); p != nil {
		t.Fatalf("problems with a safe setup: %q", p)
	}
	if got := f.Inequality(); got != "min-replicas-max-lag + 2s <= down-after-milliseconds - 1s: 4s <= 4s" {
		t.Fatalf("Inequality: %q", got)
	}
	// A sentinel that does not answer is named; the others still count.
	cfg := Config{Sentinels: append(s.Addrs(), "127.0.0.1:1"), MasterName: s.Name, KeyPrefix: "unitlease:", Node: "node-b",
		ReplyMax: time.Second, LeaseSpan: 37 * time.Second}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	f, err = b.Failover(bg)
	if err != nil || f.Sentinels != 3 || len(f.Unread) != 1 || !strings.Contains(f.Unread[0], "sentinel 127.0.0.1:1:") || len(f.Problems()) != 1 {
		t.Fatalf("with a dead sentinel: %+v, %v", f, err)
	}
}

func TestFailoverProblems(t *testing.T) {
	fences := func(min int, lag time.Duration) []Fence {
		return []Fence{{Addr: "m:1", Role: "master", MinReplicas: min, MaxLag: lag},
			{Addr: "r:2", Role: "replica", MinReplicas: min, MaxLag: lag}, {Addr: "r:3", Role: "replica", MinReplicas: min, MaxLag: lag}}
	}
	ok := Failover{MinReplicas: 1, MaxLag: 10 * time.Second, Servers: fences(1, 10*time.Second), Replicas: 2,
		DownAfter: 30 * time.Second, Sentinels: 3, Known: 3}
	for _, c := range []struct {
		mod  func(*Failover)
		want string
	}{
		{func(f *Failover) { f.Servers[2].MinReplicas = 0 },
			"replica r:3 has min-replicas-to-write 0 and min-replicas-max-lag 10s: either 0 turns the fence off"},
		{func(f *Failover) { f.Servers[0].MaxLag = 0 }, "master m:1 has min-replicas-to-write 1 and min-replicas-max-lag 0s: either 0 turns the fence off"},
		{func(f *Failover) { f.Replicas, f.Servers = 4, f.Servers[:1] },
			"master m:1 has min-replicas-to-write 1 with 4 replicas: a master that keeps 1 of them on its side of a partition goes on taking writes; set it to 2"},
		{func(f *Failover) { f.Servers[1].MinReplicas = 3 }, "replica r:2 has min-replicas-to-write 3 but the sentinels know 2 replicas: as master it would refuse every write"},
		{func(f *Failover) { f.Sentinels = 1 }, "the sentinels know 3 sentinels, 1 answered from the configuration"},
		{func(f *Failover) { f.DownAfter = 12999 * time.Millisecond }, "min-replicas-max-lag 10s + 2s = 12s is more than down-after-milliseconds 12.999s - 1s = 11.999s"},
		{func(f *Failover) {
			f.MaxLag, f.DownAfter, f.Servers = time.Second, 500*time.Millisecond, fences(1, time.Second)
		},
			"min-replicas-max-lag 1s + 2s = 3s is more than down-after-milliseconds 500ms - 500ms = 0s"},
		{func(f *Failover) { f.Unread = []string{"could not read"} }, "could not read"},
	} {
		f := ok
		f.Servers = fences(1, 10*time.Second)
		c.mod(&f)
		p := f.Problems()
		if len(p) != 1 || !strings.HasPrefix(p[0], c.want) {
			t.Errorf("%+v: %q, want one starting %q", f, p, c.want)
		}
	}
	if p := ok.Problems(); p != nil {
		t.Fatalf("%+v: %q", ok, p)
	}
	edge := ok
	edge.DownAfter = 13 * time.Second
	if p := edge.Problems(); p != nil {
		t.Fatalf("at the bound: %q", p)
	}
}
