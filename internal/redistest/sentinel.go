package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// SentinelOptions shape a replicated Redis watched by Sentinel.
type SentinelOptions struct {
	// Replicas and Sentinels count the replicas of the master and the
	// sentinels watching it (defaults 2 and 3; the quorum is a majority).
	Replicas, Sentinels int
	// DownAfter is the sentinels' down-after-milliseconds (default 1s),
	// FailoverTimeout their failover-timeout (default 3s).
	DownAfter, FailoverTimeout time.Duration
	// MinReplicas and MaxLag are the master's and the replicas'
	// min-replicas-to-write and min-replicas-max-lag (seconds); 0
	// leaves them unset.
	MinReplicas, MaxLag int
	// Server shapes every data server (AppendOnly, Config lines,
	// Password: the sentinels authenticate with it).
	Server Options
	// SentinelPassword, when set, is the sentinels' requirepass.
	SentinelPassword string
	// Front, when set, returns for a data server's address the port at
	// which everyone else (sentinels, replicas, clients) reaches it: a
	// proxy in front of it, which a test can cut. Each server announces
	// that port, and the sentinels monitor the master there.
	Front func(addr string) int
}

// Sentinel is a master, its replicas and the sentinels that watch it, on
// loopback. Servers keep their place: Servers[0] is the first master.
type Sentinel struct {
	Name      string
	Servers   []*Server
	Sentinels []*Server
	opts      SentinelOptions
	t         failer
}

// StartSentinel starts the servers and sentinels and waits until every
// sentinel knows every replica and every other sentinel, so that a
// failover can be agreed on. Everything stops at the end of the test.
func StartSentinel(t testing.TB, opts SentinelOptions) *Sentinel {
	t.Helper()
	s := startSentinel(t, t.TempDir, opts)
	t.Cleanup(s.Stop)
	return s
}

// RunSentinel is StartSentinel for a command rather than a test: the
// servers live in directories under dir, failures end the program. Call
// Stop when done.
func RunSentinel(dir string, opts SentinelOptions) *Sentinel {
	n := 0
	return startSentinel(exitFailer{}, func() string {
		n++
		d := filepath.Join(dir, strconv.Itoa(n))
		if err := os.MkdirAll(d, 0o700); err != nil {
			exitFailer{}.Fatalf("redistest: %v", err)
		}
		return d
	}, opts)
}

// Stop ends every server and sentinel.
func (s *Sentinel) Stop() {
	for _, srv := range append(append([]*Server(nil), s.Sentinels...), s.Servers...) {
		srv.Stop()
	}
}

func startSentinel(t failer, tempDir func() string, opts SentinelOptions) *Sentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		t.Fatalf("redistest: redis-sentinel is not installed (apt-get install redis-sentinel): %v", err)
	}
	if opts.Replicas == 0 {
		opts.Replicas = 2
	}
	if opts.Sentinels == 0 {
		opts.Sentinels = 3
	}
	if opts.DownAfter == 0 {
		opts.DownAfter = time.Second
	}
	if opts.FailoverTimeout == 0 {
		opts.FailoverTimeout = 3 * time.Second
	}
	s := &Sentinel{Name: "unitlease", opts: opts, t: t}
	start := func(srv *Server) *Server {
		srv.start()
		return srv
	}
	var master *Server
	for i := range 1 + opts.Replicas {
		srv := &Server{Dir: tempDir(), t: t, Port: FreePort(t)}
		srv.front = srv.Port
		if opts.Front != nil {
			srv.front = opts.Front(srv.Addr())
		}
		o := opts.Server
		o.Config = append([]string{"replica-announce-ip 127.0.0.1", "replica-announce-port " + strconv.Itoa(srv.front)}, o.Config...)
		if opts.MinReplicas > 0 {
			o.Config = append(o.Config, "min-replicas-to-write "+strconv.Itoa(opts.MinReplicas),
				"min-replicas-max-lag "+strconv.Itoa(opts.MaxLag))
		}
		if i > 0 {
			o.Config = append(o.Config, "replicaof 127.0.0.1 "+strconv.Itoa(master.front))
		}
		srv.opts = o
		start(srv)
		if i == 0 {
			master = srv
		}
		s.Servers = append(s.Servers, srv)
	}
	quorum := opts.Sentinels/2 + 1
	for range opts.Sentinels {
		sen := &Server{Dir: tempDir(), t: t, Port: FreePort(t), bin: bin}
		sen.opts.Config = []string{
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", s.Name, master.front, quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", s.Name, opts.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", s.Name, opts.FailoverTimeout.Milliseconds()),
			"sentinel announce-ip 127.0.0.1",
		}
		if pw := opts.Server.Password; pw != "" {
			sen.opts.Config = append(sen.opts.Config, fmt.Sprintf("sentinel auth-pass %s %s", s.Name, pw))
		}
		if pw := opts.SentinelPassword; pw != "" {
			sen.opts.Config = append(sen.opts.Config, "sentinel sentinel-pass "+pw)
		}
		sen.opts.Password = opts.SentinelPassword
		s.Sentinels = append(s.Sentinels, start(sen))
	}
	s.await("every sentinel knows every replica and every other sentinel", 30*time.Second, func() bool {
		if n := strings.Count(master.Command("INFO", "replication"), ",state=online,"); n != opts.Replicas {
			return false
		}
		for _, sen := range s.Sentinels {
			if n := countEntries(sen.Command("SENTINEL", "REPLICAS", s.Name)); n != opts.Replicas {
				return false
			}
			if n := countEntries(sen.Command("SENTINEL", "SENTINELS", s.Name)); n != opts.Sentinels-1 {
				return false
			}
		}
		return true
	})
	return s
}

// countEntries counts the maps in redis-cli's printout of a list of
// maps (each starts with its "name" field).
func countEntries(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if l == "name" {
			n++
		}
	}
	return n
}

// FrontPort is the port the sentinels, the replicas and the clients
// reach srv at (SentinelOptions.Front), and that the sentinels list it
// under.
func (srv *Server) FrontPort() int { return srv.front }

// Addrs are the sentinels' host:port addresses.
func (s *Sentinel) Addrs() []string {
	var a []string
	for _, sen := range s.Sentinels {
		a = append(a, sen.Addr())
	}
	return a
}

// Master is the server the first sentinel names as master.
func (s *Sentinel) Master() *Server {
	s.t.Helper()
	f := strings.Fields(s.Sentinels[0].Command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name))
	if len(f) != 2 {
		s.t.Fatalf("redistest: no master address: %q", f)
	}
	for _, srv := range s.Servers {
		if strconv.Itoa(srv.front) == f[1] {
			return srv
		}
	}
	s.t.Fatalf("redistest: master %v is none of the servers", f)
	return nil
}

// Failover forces a failover (SENTINEL FAILOVER) and waits until every
// sentinel names a new master and that server says it is one.
func (s *Sentinel) Failover() *Server {
	s.t.Helper()
	old := s.Master()
	s.Sentinels[0].Command("SENTINEL", "FAILOVER", s.Name)
	return s.AwaitNewMaster(old)
}

// Rejoin starts a stopped server again as a replica of the current
// master (as Sentinel would reconfigure it once it is back).
func (s *Sentinel) Rejoin(srv *Server) {
	s.t.Helper()
	master := s.Master()
	var cfg []string
	for _, l := range srv.opts.Config {
		if !strings.HasPrefix(l, "replicaof ") {
			cfg = append(cfg, l)
		}
	}
	srv.opts.Config = append(cfg, "replicaof 127.0.0.1 "+strconv.Itoa(master.front))
	srv.start()
}

// SetAll runs CONFIG SET name value on every running data server.
func (s *Sentinel) SetAll(name, value string) {
	s.t.Helper()
	for _, srv := range s.Servers {
		if srv.cmd != nil {
			srv.Command("CONFIG", "SET", name, value)
		}
	}
}

// AwaitNewMaster waits until every sentinel names another master than old
// and that server reports role master.
func (s *Sentinel) AwaitNewMaster(old *Server) *Server {
	s.t.Helper()
	var now *Server
	s.await("a new master", 30*time.Second, func() bool {
		for _, sen := range s.Sentinels {
			if sen.cmd == nil {
				continue
			}
			f := strings.Fields(sen.Command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.Name))
			if len(f) != 2 || f[1] == strconv.Itoa(old.front) {
				return false
			}
		}
		now = s.Master()
		return strings.HasPrefix(now.Command("ROLE"), "master")
	})
	return now
}

// await polls cond until it holds: the harness waiting for processes it
// started, not a test's synchronisation.
func (s *Sentinel) await(what string, limit time.Duration, cond func() bool) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			var logs []string
			for _, sen := range s.Sentinels {
				logs = append(logs, filepath.Base(sen.Dir)+":\n"+sen.Log())
			}
			s.t.Fatalf("redistest: no %s within %v\n%s", what, limit, strings.Join(logs, "\n"))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
