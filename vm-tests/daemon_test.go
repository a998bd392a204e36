//go:build linux

package vmtests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

// The daemon's end-to-end tests: two nodes of the package's cluster, each
// running unitlease.service as installed from packaging/, a real Redis on
// the host reached through one proxy per node (so one node can be cut off),
// and a witness unit annotated for the lease "demo".

// fastTiming is the tests' timing profile: the lease span comes to about
// 6 s, so a failover takes seconds, not a minute.
const fastTiming = `[timing]
retry = "1s"
renew_deadline = "2s"
stop_wait = "2s"
reply_max = "500ms"
poll_min = "500ms"
poll_max = "1s"
`

const demoUnit = `[Unit]
Description=unitlease demo witness

[Service]
ExecStart=/usr/local/bin/ul-witness -dir /shared -name %s

[X-UnitLease]
Lease=demo
`

var (
	buildOnce                sync.Once
	unitleaseBin, witnessBin string
	buildErr                 error
)

// binaries builds unitlease and the witness once per package run.
func binaries(t *testing.T) (string, string) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ul-bin-")
		if err != nil {
			buildErr = err
			return
		}
		unitleaseBin, witnessBin = filepath.Join(dir, "unitlease"), filepath.Join(dir, "witness")
		ctx := context.Background()
		if buildErr = BuildStatic(ctx, "../cmd/unitlease", unitleaseBin); buildErr == nil {
			buildErr = BuildStatic(ctx, "./testdata/witness", witnessBin)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return unitleaseBin, witnessBin
}

// daemons is one test's deployment.
type daemons struct {
	t       *testing.T
	redis   *redistest.Server
	proxies []*Proxy
	nodes   []*Node
	witness string           // the witness's name: its log is sharedDir/NAME.log
	cursors map[*Node]string // each node's journal position at deploy
}

// deploy installs unitlease and the witness unit on both nodes and starts
// the daemons.
func deploy(t *testing.T) *daemons {
	t.Helper()
	bin, wit := binaries(t)
	d := &daemons{t: t, redis: redistest.Start(t, redistest.Options{AppendOnly: true}),
		witness: strings.ReplaceAll(t.Name(), "/", "-"), cursors: map[*Node]string{}}
	service, err := os.ReadFile("../packaging/unitlease.service")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		n := cluster.Node(i)
		p, err := NewProxy(d.redis.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		d.proxies, d.nodes = append(d.proxies, p), append(d.nodes, n)
		conf := fmt.Sprintf("node = %q\n[redis]\nurl = \"redis://%s/0\"\n%s", n.Name, p.Addr(), fastTiming)
		d.put(n, "/usr/bin/unitlease", bin, 0o755)
		d.put(n, "/usr/local/bin/ul-witness", wit, 0o755)
		d.write(n, "/etc/systemd/system/unitlease.service", string(service))
		d.write(n, "/etc/unitlease/unitlease.toml", conf)
		d.write(n, "/etc/systemd/system/demo.service", fmt.Sprintf(demoUnit, d.witness))
	}
	t.Cleanup(d.teardown)
	for _, n := range d.nodes {
		d.cursors[n] = cursor(t, n)
		run(t, n, "systemctl", "daemon-reload")
		run(t, n, "systemctl", "start", "unitlease.service")
	}
	return d
}

func (d *daemons) put(n *Node, path, src string, mode os.FileMode) {
	d.t.Helper()
	if err := n.CopyIn(d.t.Context(), src, path, mode); err != nil {
		d.t.Fatal(err)
	}
}

func (d *daemons) write(n *Node, path, data string) {
	d.t.Helper()
	if err := n.WriteFile(d.t.Context(), path, []byte(data), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// teardown stops the daemons and removes what deploy installed, so the
// next test finds the nodes as they were.
func (d *daemons) teardown() {
	ctx := context.Background()
	for _, n := range d.nodes {
		_, _, _ = n.Run(ctx, "systemctl", "stop", "unitlease.service", "demo.service", "other.service")
		_, _, _ = n.Run(ctx, "rm", "-rf", "/etc/systemd/system/demo.service", "/etc/systemd/system/other.service",
			"/etc/systemd/system/unitlease.service", "/etc/unitlease", "/run/systemd/system/demo.service.d", "/run/systemd/system/other.service.d")
		_, _, _ = n.Run(ctx, "systemctl", "daemon-reload")
		_, _, _ = n.Run(ctx, "systemctl", "reset-failed")
	}
}

// active reports the ActiveState of unit on n.
func active(t *testing.T, n *Node, unit string) string {
	t.Helper()
	out, _, _ := n.Run(t.Context(), "systemctl", "show", "-P", "ActiveState", unit)
	return trimNL(out)
}

// leader waits until exactly one node runs demo.service and returns it.
// Polling here is the harness waiting on a distributed system; the
// assertions are about what it then finds.
func (d *daemons) leader(limit time.Duration) (leader, standby *Node) {
	d.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		a, b := active(d.t, d.nodes[0], "demo.service"), active(d.t, d.nodes[1], "demo.service")
		switch {
		case a == "active" && b == "active":
			d.t.Fatalf("demo.service runs on both nodes")
		case a == "active":
			return d.nodes[0], d.nodes[1]
		case b == "active":
			return d.nodes[1], d.nodes[0]
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("no node runs demo.service after %v\n%s", limit, d.journals())
	return nil, nil
}

func (d *daemons) journals() string {
	var b strings.Builder
	for _, n := range d.nodes {
		out, _, _ := n.Run(context.Background(), "journalctl", "-u", "unitlease.service", "-o", "cat", "--no-pager", "-n", "40")
		fmt.Fprintf(&b, "--- %s\n%s", n.Name, out)
	}
	return b.String()
}

// cursor is the position of n's journal now.
func cursor(t *testing.T, n *Node) string {
	t.Helper()
	out := run(t, n, "journalctl", "-n", "0", "--show-cursor", "--no-pager")
	_, c, _ := strings.Cut(out, "-- cursor: ")
	return strings.TrimSpace(c)
}

// journal returns n's journal since deploy, with extra journalctl args.
func (d *daemons) journal(n *Node, args ...string) string {
	d.t.Helper()
	args = append([]string{"journalctl", "--no-pager", "--after-cursor", d.cursors[n]}, args...)
	out, _, _ := n.Run(d.t.Context(), args...)
	return out
}

// events returns the UNITLEASE_EVENT values n's daemon logged since
// deploy, in order.
func (d *daemons) events(n *Node) []string {
	d.t.Helper()
	out := d.journal(n, "-u", "unitlease.service", "-o", "json", "--output-fields=UNITLEASE_EVENT")
	var evs []string
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Event string `json:"UNITLEASE_EVENT"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Event != "" {
			evs = append(evs, e.Event)
		}
	}
	return evs
}

func has(evs []string, e string) bool {
	for _, x := range evs {
		if x == e {
			return true
		}
	}
	return false
}

// witnessLog reads the witness's log: the violations it recorded.
func (d *daemons) violations() []string {
	data, _ := os.ReadFile(filepath.Join(sharedDir, d.witness+".log"))
	var v []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "violation") {
			v = append(v, line)
		}
	}
	return v
}

func (d *daemons) noViolations() {
	d.t.Helper()
	if v := d.violations(); len(v) > 0 {
		d.t.Fatalf("the witness saw two copies running: %v", v)
	}
}

// waitInactive waits until unit is not active on n.
func waitState(t *testing.T, n *Node, unit, want string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for active(t, n, unit) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s is %s, not %s, after %v", unit, n.Name, active(t, n, unit), want, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDaemonExactlyOneRuns(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	if got := active(t, standby, "demo.service"); got == "active" {
		t.Fatalf("standby %s runs demo.service too", standby.Name)
	}
	out := run(t, leader, "unitlease", "status", "--json")
	var snap struct {
		Leases []struct {
			Lease, Role, Holder string
			Holding             bool
		}
		Cluster []struct {
			Lease, Holder, State string
			Watchers             int
		}
	}
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	if len(snap.Leases) != 1 || snap.Leases[0].Role != "leader" || !snap.Leases[0].Holding || snap.Leases[0].Holder != leader.Name {
		t.Fatalf("leader's status: %s", out)
	}
	if len(snap.Cluster) != 1 || snap.Cluster[0].Holder != leader.Name || snap.Cluster[0].Watchers != 2 {
		t.Fatalf("cluster view: %s", out)
	}
	if evs := d.events(leader); !has(evs, "acquired") || !has(evs, "started") {
		t.Fatalf("leader journal events %v lack acquired and started", evs)
	}
	table := run(t, standby, "unitlease", "status")
	if !strings.Contains(table, "standby") || !strings.Contains(table, leader.Name) {
		t.Fatalf("standby's status table:\n%s", table)
	}
	t.Logf("status on the standby:\n%s", table)
	d.noViolations()
}

// record is one line of the witness log.
type record struct {
	what, node string
	at         time.Duration // CLOCK_MONOTONIC, shared by every node
}

func (d *daemons) records() []record {
	data, _ := os.ReadFile(filepath.Join(sharedDir, d.witness+".log"))
	var rs []record
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r record
		var ns int64
		if _, err := fmt.Sscanf(line, "%s %s %d", &r.what, &r.node, &ns); err == nil {
			r.at = time.Duration(ns)
			rs = append(rs, r)
		}
	}
	return rs
}

// handover checks from the witness log that old stopped before new
// started, and returns the gap.
func (d *daemons) handover(old, new *Node) time.Duration {
	d.t.Helper()
	d.noViolations()
	var stopped, started time.Duration = -1, -1
	for _, r := range d.records() {
		switch {
		case r.what == "stop" && r.node == old.Name:
			stopped = r.at
		case r.what == "start" && r.node == new.Name && started < 0 && stopped >= 0:
			started = r.at
		}
	}
	if stopped < 0 || started < 0 || started < stopped {
		d.t.Fatalf("witness log does not show %s stopping before %s starts: %+v", old.Name, new.Name, d.records())
	}
	return started - stopped
}

// status returns the lease "demo" as n's daemon reports it.
func status(t *testing.T, n *Node) (role string, holding bool, version uint64) {
	t.Helper()
	out, _, err := n.Run(t.Context(), "unitlease", "status", "--json")
	if err != nil {
		return "unreachable", false, 0
	}
	var snap struct {
		Leases []struct {
			Role    string
			Holding bool
			Version uint64
		}
	}
	if json.Unmarshal([]byte(out), &snap) != nil || len(snap.Leases) != 1 {
		return "unknown", false, 0
	}
	l := snap.Leases[0]
	return l.Role, l.Holding, l.Version
}

func TestDaemonLeaderCutOffFromRedisStopsBeforePeerStarts(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	d.proxies[index(d, leader)].Cut()
	waitState(t, leader, "demo.service", "inactive", 30*time.Second)
	waitState(t, standby, "demo.service", "active", 60*time.Second)
	gap := d.handover(leader, standby)
	t.Logf("cut off: %s stopped, %s started %v later", leader.Name, standby.Name, gap)
	if evs := d.events(leader); !has(evs, "renew_failed") || has(evs, "released") {
		t.Fatalf("cut-off leader's events %v: want renew_failed and no release", evs)
	}
	d.proxies[index(d, leader)].Heal()
	waitRole(t, leader, 30*time.Second, "standby", "backoff")
	if active(t, leader, "demo.service") == "active" {
		t.Fatal("the healed node runs demo.service again")
	}
	d.noViolations()
}

func index(d *daemons, n *Node) int {
	for i, m := range d.nodes {
		if m == n {
			return i
		}
	}
	return -1
}

func waitRole(t *testing.T, n *Node, limit time.Duration, roles ...string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		role, _, _ := status(t, n)
		for _, r := range roles {
			if role == r {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s after %v, want one of %v", n.Name, role, limit, roles)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDaemonSIGTERMHandsOverCleanly(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	_, _, before := status(t, leader)
	run(t, leader, "systemctl", "stop", "unitlease.service")
	waitState(t, standby, "demo.service", "active", 30*time.Second)
	gap := d.handover(leader, standby)
	if evs := d.events(leader); !has(evs, "released") {
		t.Fatalf("stopped leader's events %v lack released", evs)
	}
	// The peer took the released record at once: its version is the
	// release's plus one, not a fresh one after the key expired.
	_, holding, after := status(t, standby)
	if !holding || after < before+2 {
		t.Fatalf("peer holds %t at version %d; the leader had %d before releasing", holding, after, before)
	}
	if ev := d.events(standby); !has(ev, "acquired") {
		t.Fatalf("peer's events %v lack acquired", ev)
	}
	t.Logf("SIGTERM handover gap %v", gap)
}

func TestDaemonSIGKILLStopsTheUnitAndPeerTakesOver(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	run(t, leader, "systemctl", "kill", "--signal=SIGKILL", "unitlease.service")
	// BindsTo= stops the unit when its daemon dies (rule 6).
	waitState(t, leader, "demo.service", "inactive", 30*time.Second)
	waitState(t, standby, "demo.service", "active", 60*time.Second)
	gap := d.handover(leader, standby)
	t.Logf("daemon SIGKILLed: %s took over %v after the unit stopped", standby.Name, gap)
	// The restarted daemon is a standby now.
	waitRole(t, leader, 30*time.Second, "standby", "backoff")
	d.noViolations()
}

func TestDaemonGuardRefusesStartOnStandby(t *testing.T) {
	d := deploy(t)
	_, standby := d.leader(60 * time.Second)
	if _, stderr, err := standby.Run(t.Context(), "systemctl", "start", "demo.service"); err == nil {
		t.Fatalf("systemctl start on the standby succeeded: %s", stderr)
	}
	if got := active(t, standby, "demo.service"); got == "active" {
		t.Fatal("demo.service runs on the standby")
	}
	out := d.journal(standby, "-u", "demo.service", "-o", "cat")
	if !strings.Contains(out, "unitlease guard: refusing to start demo.service") {
		all := d.journal(standby, "-o", "cat")
		t.Fatalf("the guard's refusal is not in demo.service's journal:\n%s\nwhole journal:\n%s", out, all)
	}
	if evs := d.events(standby); !has(evs, "refused") {
		t.Fatalf("standby's events %v lack refused", evs)
	}
	d.noViolations()
}

func TestDaemonBadAnnotationIsAConfigErrorOthersKeepWorking(t *testing.T) {
	d := deploy(t)
	leader, _ := d.leader(60 * time.Second)
	d.write(leader, "/etc/systemd/system/other.service", "[Service]\nExecStart=/bin/sleep infinity\n\n[X-UnitLease]\nLease=other\nBogus=1\n")
	run(t, leader, "systemctl", "daemon-reload") // the daemon rediscovers after a reload
	deadline := time.Now().Add(30 * time.Second)
	var out string
	for !strings.Contains(out, "other.service:6") {
		if time.Now().After(deadline) {
			t.Fatalf("no config_error naming other.service:6 in the journal:\n%s", out)
		}
		time.Sleep(100 * time.Millisecond)
		out = d.journal(leader, "-u", "unitlease.service", "-o", "cat", "UNITLEASE_EVENT=config_error")
	}
	if got := active(t, leader, "demo.service"); got != "active" {
		t.Fatalf("demo.service is %s after the bad annotation", got)
	}
	if role, holding, _ := status(t, leader); role != "leader" || !holding {
		t.Fatalf("leader is %s (holding %t) after the bad annotation", role, holding)
	}
	d.noViolations()
}

func TestDaemonBadConfigRefusesToRun(t *testing.T) {
	d := deploy(t)
	n := d.nodes[0]
	d.write(n, "/etc/unitlease/unitlease.toml", "node = \"x\"\n[timing]\nlease_span = \"3s\"\n")
	if _, _, err := n.Run(t.Context(), "systemctl", "restart", "unitlease.service"); err == nil {
		t.Fatal("unitlease started with a lease span below the safe minimum")
	}
	out := d.journal(n, "-u", "unitlease.service", "-o", "cat", "UNITLEASE_EVENT=config_error")
	if !strings.Contains(out, "/etc/unitlease/unitlease.toml:3: timing.lease_span: lease_span 3s is below the safe minimum") {
		t.Fatalf("the journal does not say why:\n%s", out)
	}
	if status := run(t, n, "systemctl", "show", "-P", "ExecMainStatus", "unitlease.service"); status != "1" {
		t.Fatalf("exit status %s, want 1", status)
	}
}
