//go:build linux

package vmtests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

// The daemon's end-to-end tests: two nodes of the package's cluster, each
// running unitlease.service as installed from packaging/, a real Redis on
// the host reached through one proxy per node (so one node can be cut off),
// and the witness as demo.service, annotated for the lease "demo".

var (
	buildOnce    sync.Once
	unitleaseBin Programs
	witnessBin   string
	buildErr     error
)

// binaries builds unitlease and the witness once per package run.
func binaries(t *testing.T) (Programs, string) {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ul-bin-")
		if err != nil {
			buildErr = err
			return
		}
		witnessBin = filepath.Join(dir, "witness")
		ctx := context.Background()
		if unitleaseBin, buildErr = BuildUnitlease(ctx, "..", dir); buildErr == nil {
			buildErr = BuildStatic(ctx, "./testdata/witness", witnessBin)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return unitleaseBin, witnessBin
}

// daemons is one test's deployment on the package's two nodes.
type daemons struct {
	*Deployment
	t     *testing.T
	nodes []*Node
}

// deploy installs unitlease and the witness unit on the first two nodes,
// starts the daemons, and tears it all down when the test ends.
func deploy(t *testing.T, witnessArgs ...string) *daemons {
	t.Helper()
	return deployOn(t, []*Node{cluster.Node(0), cluster.Node(1)}, witnessArgs...)
}

// deployOn is deploy on the nodes given.
func deployOn(t *testing.T, nodes []*Node, witnessArgs ...string) *daemons {
	t.Helper()
	bin, wit := binaries(t)
	service, err := os.ReadFile("../packaging/unitlease.service")
	if err != nil {
		t.Fatal(err)
	}
	redis := redistest.Start(t, redistest.Options{AppendOnly: true})
	dep, err := Deploy(t.Context(), nodes, DeployOptions{
		Unitlease: bin, Witness: wit, Service: service, RedisAddr: redis.Addr(),
		SharedDir: sharedDir, WitnessName: strings.ReplaceAll(t.Name(), "/", "-"), WitnessArgs: strings.Join(witnessArgs, " "),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dep.Teardown(context.Background()) })
	return &daemons{Deployment: dep, t: t, nodes: nodes}
}

func (d *daemons) write(n *Node, path, data string) {
	d.t.Helper()
	if err := n.WriteFile(d.t.Context(), path, []byte(data), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

// active reports the ActiveState of unit on n.
func active(t *testing.T, n *Node, unit string) string {
	t.Helper()
	return Active(t.Context(), n, unit)
}

// leader waits until one node runs demo.service.
func (d *daemons) leader(limit time.Duration) (leader, standby *Node) {
	d.t.Helper()
	l, err := d.Leader(d.t.Context(), limit)
	if err != nil {
		d.t.Fatalf("%v\n%s", err, d.journals())
	}
	if l == d.nodes[0] {
		return l, d.nodes[1]
	}
	return l, d.nodes[0]
}

// others are the deployment's nodes but n.
func (d *daemons) others(n *Node) []*Node {
	var o []*Node
	for _, m := range d.nodes {
		if m != n {
			o = append(o, m)
		}
	}
	return o
}

func (d *daemons) journals() string {
	var b strings.Builder
	for _, n := range d.nodes {
		fmt.Fprintf(&b, "--- %s\n%s", n.Name, d.Journal(context.Background(), n, "-u", "unitlease.service", "-o", "cat"))
	}
	return b.String()
}

func (d *daemons) journal(n *Node, args ...string) string {
	return d.Journal(d.t.Context(), n, args...)
}

func (d *daemons) events(n *Node) []string { return d.Events(d.t.Context(), n) }

func has(evs []string, e string) bool {
	for _, x := range evs {
		if x == e {
			return true
		}
	}
	return false
}

func (d *daemons) noViolations() {
	d.t.Helper()
	if v := d.Violations(); len(v) > 0 {
		d.t.Fatalf("the witness saw two copies running: %v", v)
	}
}

// waitState waits until unit on n is in the ActiveState want.
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

// handover checks from the witness log that old stopped before new
// started, and returns the gap. The unit is active (Type=simple) as soon
// as the witness is forked, a moment before it writes its start record:
// the log is read again until that record is there, for up to 10 s.
func (d *daemons) handover(old, new *Node) time.Duration {
	d.t.Helper()
	d.noViolations()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var stopped, started time.Duration = -1, -1
		for _, r := range d.Records() {
			switch {
			case r.What == "stop" && r.Node == old.Name:
				stopped = r.At
			case r.What == "start" && r.Node == new.Name && started < 0 && stopped >= 0:
				started = r.At
			}
		}
		if stopped >= 0 && started >= stopped {
			return started - stopped
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("witness log does not show %s stopping before %s starts: %+v", old.Name, new.Name, d.Records())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// status returns the lease "demo" as n's daemon reports it.
func status(t *testing.T, n *Node) (role string, holding bool, version uint64) {
	t.Helper()
	st := LeaseStatus(t.Context(), n)
	return st.Role, st.Holding, st.Version
}

func TestDaemonLeaderCutOffFromRedisStopsBeforePeerStarts(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	d.Proxy(leader).Cut()
	waitState(t, leader, "demo.service", "inactive", 30*time.Second)
	waitState(t, standby, "demo.service", "active", 60*time.Second)
	gap := d.handover(leader, standby)
	t.Logf("cut off: %s stopped, %s started %v later", leader.Name, standby.Name, gap)
	if evs := d.events(leader); !has(evs, "renew_failed") || has(evs, "released") {
		t.Fatalf("cut-off leader's events %v: want renew_failed and no release", evs)
	}
	d.Proxy(leader).Heal()
	waitRole(t, leader, 30*time.Second, "standby", "backoff")
	if active(t, leader, "demo.service") == "active" {
		t.Fatal("the healed node runs demo.service again")
	}
	d.noViolations()
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
	if evs := d.events(leader); !has(evs, "released") || has(evs, "unit_failed") {
		t.Fatalf("stopped leader's events %v: want released, and no unit_failed (systemd stops the bound unit first, a planned stop)", evs)
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
	// journald reads the guard's stderr on its own time: systemctl can
	// return before the line is in the journal. Ask journald to catch up
	// (--sync) and read again, a bounded number of times.
	var out string
	for range 50 {
		_, _, _ = standby.Run(t.Context(), "journalctl", "--sync")
		if out = d.journal(standby, "-u", "demo.service", "-o", "cat"); strings.Contains(out, "unitlease guard: refusing to start demo.service") {
			break
		}
	}
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
		out = d.Messages(t.Context(), leader, "config_error")
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
	out := d.Messages(t.Context(), n, "config_error")
	if !strings.Contains(out, "/etc/unitlease/unitlease.toml:3: timing.lease_span: lease_span 3s is below the safe minimum") {
		t.Fatalf("the journal does not say why:\n%s", out)
	}
	if status := run(t, n, "systemctl", "show", "-P", "ExecMainStatus", "unitlease.service"); status != "1" {
		t.Fatalf("exit status %s, want 1", status)
	}
}

// watchers is what n's `unitlease status --json` counts as watching the
// lease "demo" (-1 if it cannot be read).
func watchers(t *testing.T, n *Node) int {
	t.Helper()
	out, _, err := n.Run(t.Context(), "unitlease", "status", "--json")
	var snap struct{ Cluster []struct{ Watchers int } }
	if err != nil || json.Unmarshal([]byte(out), &snap) != nil || len(snap.Cluster) != 1 {
		return -1
	}
	return snap.Cluster[0].Watchers
}

// TestDaemonHandoffRefusesAfterReloadsWhenThePeerIsGone: every reload
// (systemctl daemon-reload, SIGHUP) subscribes anew; the subscription it
// replaces must end, or peers count it as a watcher. Before, three
// reloads took the count from 2 to 5, and with the peer's daemon stopped
// `unitlease handoff` still saw watchers, stopped the only copy and
// released the lease: the service was down until someone started it.
func TestDaemonHandoffRefusesAfterReloadsWhenThePeerIsGone(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	for range 3 {
		run(t, leader, "systemctl", "daemon-reload")
		run(t, leader, "systemctl", "reload", "unitlease.service")
	}
	run(t, standby, "systemctl", "stop", "unitlease.service")
	// The leader's own subscription is the one left (its replaced ones
	// end as they are replaced; the server forgets a closed connection's
	// a moment later). Before the fix the count stayed at 7.
	for deadline := time.Now().Add(30 * time.Second); watchers(t, leader) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("watchers of demo: %d after 6 reloads and the peer's daemon stopped, want 1 (the leader's own)\n%s",
				watchers(t, leader), d.journals())
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, stderr, err := leader.Run(t.Context(), "unitlease", "handoff", "demo")
	if err == nil {
		t.Fatalf("handoff with no peer watching succeeded: %s%s", out, stderr)
	}
	if !strings.Contains(stderr, "no other node") && !strings.Contains(stderr, "watch") {
		t.Errorf("handoff's refusal does not say that no peer watches: %q", stderr)
	}
	if got := active(t, leader, "demo.service"); got != "active" {
		t.Fatalf("demo.service on the leader is %s after a refused handoff", got)
	}
	d.noViolations()
}

// TestCheckWhileTheDaemonIsStopped: systemd reports WatchdogUSec=infinity
// for a stopped service, whatever its file says. check, run before the
// daemon's first start (or while it is stopped), says so and assumes the
// packaged watchdog; before, it failed with "WatchdogSec
// 2562047h47m16.854775807s ... run refuses to start" and went no further.
func TestCheckWhileTheDaemonIsStopped(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	run(t, standby, "systemctl", "stop", "unitlease.service")
	out, stderr, _ := standby.Run(t.Context(), "unitlease", "check")
	if !strings.Contains(out, "warning  unitlease.service is inactive, and systemd reports a watchdog only while it runs") ||
		strings.Contains(out, "2562047h") || !strings.Contains(out, "redis ") || stderr != "" {
		t.Fatalf("check with the daemon stopped:\n%s\nstderr:\n%s", out, stderr)
	}
	if got := active(t, leader, "demo.service"); got != "active" {
		t.Fatalf("demo.service on the leader is %s", got)
	}
}

// TestEnablingTheLeadersUnitRefusesItAtOnce: `systemctl enable` on the
// leader reloads systemd, and with it the daemon: the unit is refused at
// that reload (config_error, a refused row in status with the reason),
// the leader stops it and hands the lease off as ineligible, and the
// standby takes over. Not at the next restart.
func TestEnablingTheLeadersUnitRefusesItAtOnce(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	// An [Install] section, as most services have, without a reload of
	// its own: enable reloads systemd.
	unit := run(t, leader, "cat", "/etc/systemd/system/demo.service")
	d.write(leader, "/etc/systemd/system/demo.service", unit+"\n[Install]\nWantedBy=multi-user.target\n")
	run(t, leader, "systemctl", "enable", "demo.service")
	t.Cleanup(func() { leader.Run(context.Background(), "systemctl", "disable", "demo.service") })
	waitState(t, standby, "demo.service", "active", 60*time.Second)
	d.handover(leader, standby)
	if msgs := d.Messages(t.Context(), leader, "config_error"); !strings.Contains(msgs, "demo.service") || !strings.Contains(msgs, "enabled") {
		t.Fatalf("no config_error naming demo.service as enabled:\n%s", msgs)
	}
	table := run(t, leader, "unitlease", "status")
	if !strings.Contains(table, "ineligible") || !strings.Contains(table, "enabled") {
		t.Fatalf("status on the old leader does not say why demo.service no longer runs there:\n%s", table)
	}
	if evs := d.events(leader); has(evs, "unit_failed") {
		t.Fatalf("the old leader's events %v: a refusal is no unit failure", evs)
	}
	d.noViolations()
}

// TestTheTokenGrowsAcrossHandoffsAndCrashes: every start of the witness
// reads UNITLEASE_TOKEN from its environment, and the token of each
// tenure is larger than the one before, across a handoff and a crash of
// the leader's daemon.
func TestTheTokenGrowsAcrossHandoffsAndCrashes(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	run(t, leader, "unitlease", "handoff", "demo")
	waitState(t, standby, "demo.service", "active", 30*time.Second)
	d.handover(leader, standby)
	run(t, standby, "systemctl", "kill", "--signal=SIGKILL", "unitlease.service")
	waitState(t, leader, "demo.service", "active", 60*time.Second)
	d.handover(standby, leader)
	var tokens []uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		tokens = tokens[:0]
		for _, r := range d.Records() {
			if r.What == "start" {
				v, err := strconv.ParseUint(r.Token, 10, 64)
				if err != nil {
					t.Fatalf("a start without a token: %+v", r)
				}
				tokens = append(tokens, v)
			}
		}
		if len(tokens) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	if len(tokens) != 3 || !(tokens[0] < tokens[1] && tokens[1] < tokens[2]) {
		t.Fatalf("tokens of the three tenures: %v, want three, each larger than the one before", tokens)
	}
	t.Logf("tokens: %v", tokens)
	d.noViolations()
}
