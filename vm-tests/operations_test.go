//go:build linux

package vmtests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// The operations in booted nodes: drain and undrain, handoff --to.

// snapshot is the part of `unitlease status --json` these tests read.
type snapshot struct {
	Drained      bool     `json:"drained"`
	DrainedNodes []string `json:"drained_nodes"`
	Timing       struct {
		LeaseSpan time.Duration `json:"lease_span_ns"`
	} `json:"timing"`
	Cluster []struct {
		Lease, Holder, State, Next string
		Token                      uint64
		Last                       *struct{ From, To, Why string } `json:"last_transition"`
		Failures                   []struct {
			Node  string
			Count int
		}
	} `json:"cluster"`
}

// lastTransition waits until n's status shows the lease's last
// transition as from -> to, and returns its reason and the token.
func lastTransition(t *testing.T, n *Node, from, to *Node) (why string, token uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c := statusJSON(t, n).Cluster
		if len(c) == 1 && c[0].Last != nil && c[0].Last.From == from.Name && c[0].Last.To == to.Name {
			return c[0].Last.Why, c[0].Token
		}
		if time.Now().After(deadline) {
			t.Fatalf("status on %s never showed a transition from %s to %s: %+v", n.Name, from.Name, to.Name, c)
		}
	}
}

func statusJSON(t *testing.T, n *Node) snapshot {
	t.Helper()
	out := run(t, n, "unitlease", "status", "--json")
	var s snapshot
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json on %s: %v\n%s", n.Name, err, out)
	}
	return s
}

// TestDrainShedsTheLeaseAndTakesNoneAcrossARestart: drain on the leader
// hands the lease to the standby; the drained node stays drained across a
// restart of its daemon, every node's status says so, and with the lease
// released by the other node it takes nothing for twice the lease span;
// undrain lets it take the lease. Then, with no peer, drain names the
// lease and leaves it running (exit 1), and drain --stop stops it.
func TestDrainShedsTheLeaseAndTakesNoneAcrossARestart(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	out, stderr, err := leader.Run(t.Context(), "unitlease", "drain")
	if err != nil || !strings.Contains(out, "demo: handed off to "+standby.Name) {
		t.Fatalf("drain: %v\n%s%s\n%s", err, out, stderr, d.journals())
	}
	t.Logf("unitlease drain on %s:\n%s", leader.Name, out)
	waitState(t, standby, "demo.service", "active", 30*time.Second)
	t.Logf("drain: %s started demo.service %v after %s stopped it", standby.Name, d.handover(leader, standby), leader.Name)
	table := run(t, standby, "unitlease", "status")
	if !strings.Contains(table, "Drained nodes (they take no lease): "+leader.Name) {
		t.Fatalf("status on %s does not show %s drained:\n%s", standby.Name, leader.Name, table)
	}
	t.Logf("unitlease status on %s:\n%s", standby.Name, table)
	if why, token := lastTransition(t, leader, leader, standby); why != "drain" || token == 0 {
		t.Fatalf("the drain's transition: why %q, token %d", why, token)
	}

	run(t, leader, "systemctl", "restart", "unitlease.service")
	if s := statusJSON(t, leader); !s.Drained {
		t.Fatalf("%s is no longer drained after a restart of its daemon", leader.Name)
	}
	if evs := d.events(leader); !has(evs, "drained") {
		t.Fatalf("%s's events %v lack drained", leader.Name, evs)
	}

	// The other node's daemon stops: it releases the lease, which the
	// drained node would take at once if it competed.
	run(t, standby, "systemctl", "stop", "unitlease.service")
	span := statusJSON(t, leader).Timing.LeaseSpan
	for deadline := time.Now().Add(span*2 + 30*time.Second); ; time.Sleep(200 * time.Millisecond) {
		st := LeaseStatus(t.Context(), leader)
		if st.Holding || active(t, leader, "demo.service") != "inactive" {
			t.Fatalf("the drained node %s took the lease: %+v\n%s", leader.Name, st, d.journals())
		}
		if st.LeaseAge > 2*span {
			t.Logf("drained %s left the released lease alone for %v (lease span %v)", leader.Name, st.LeaseAge, span)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never saw the released record age two lease spans: %+v", leader.Name, st)
		}
	}

	run(t, leader, "unitlease", "undrain")
	waitState(t, leader, "demo.service", "active", 30*time.Second)
	if s := statusJSON(t, leader); s.Drained || len(s.DrainedNodes) > 0 {
		t.Fatalf("after undrain, status says drained %t, drained nodes %v", s.Drained, s.DrainedNodes)
	}

	// No peer now: drain says which lease has none and leaves it running.
	out, _, err = leader.Run(t.Context(), "unitlease", "drain")
	if exitCode(err) != 1 || !strings.Contains(out, "demo: left running: no other node announces itself ready") {
		t.Fatalf("drain with no peer: exit %d\n%s", exitCode(err), out)
	}
	if got := active(t, leader, "demo.service"); got != "active" {
		t.Fatalf("drain with no peer left demo.service %s", got)
	}
	out, _, err = leader.Run(t.Context(), "unitlease", "drain", "--stop")
	if err != nil || !strings.Contains(out, "demo: no other node is ready: stopped and released") {
		t.Fatalf("drain --stop: %v\n%s", err, out)
	}
	if got := active(t, leader, "demo.service"); got != "inactive" {
		t.Fatalf("drain --stop left demo.service %s", got)
	}
	if c := statusJSON(t, leader).Cluster; len(c) != 1 || c[0].State != "released" {
		t.Fatalf("after drain --stop the record is %+v, want released", c)
	}
	run(t, leader, "unitlease", "undrain")
	d.noViolations()
}

// TestHandoffToLandsOnTheNamedNode: on three nodes, four handoffs --to
// alternate between the two standbys, and each lands on the node named
// (the witness's starts are exactly that sequence); a handoff to a node
// whose daemon is stopped, to a drained node, or to this node is refused
// with the reason, and the unit keeps running.
func TestHandoffToLandsOnTheNamedNode(t *testing.T) {
	d := deployOn(t, []*Node{cluster.Node(0), cluster.Node(1), cluster.Node(2)})
	leader, _ := d.leader(60 * time.Second)
	want := []string{leader.Name}
	for i := range 4 {
		to := d.others(leader)[i%2]
		// A release is witnessed only over the holder's own record: a
		// node that has not read the new holder's record since the last
		// handoff waits a lease span, as it should, and the command
		// times out.
		waitSeenHeld(t, to, "demo", leader.Name, 30*time.Second)
		out, stderr, err := leader.Run(t.Context(), "unitlease", "handoff", "demo", "--to", to.Name)
		if err != nil || !strings.Contains(out, "now held by "+to.Name) {
			t.Fatalf("handoff --to %s on %s: %v: %s%s\n%s", to.Name, leader.Name, err, out, stderr, d.journals())
		}
		waitState(t, to, "demo.service", "active", 30*time.Second)
		want = append(want, to.Name)
		leader = to
	}
	var starts []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		starts = starts[:0]
		for _, r := range d.Records() {
			if r.What == "start" {
				starts = append(starts, r.Node)
			}
		}
		if len(starts) >= len(want) || time.Now().After(deadline) {
			break
		}
	}
	if strings.Join(starts, " ") != strings.Join(want, " ") {
		t.Fatalf("the witness started on %v, want %v", starts, want)
	}
	t.Logf("handoff --to landed on %v", want[1:])

	gone, drained := d.others(leader)[0], d.others(leader)[1]
	run(t, gone, "systemctl", "stop", "unitlease.service")
	run(t, drained, "unitlease", "drain")
	for _, c := range []struct {
		to   *Node
		says string
	}{
		{gone, "it does not watch the lease"},
		{drained, "it is drained"},
		{leader, "is this node"},
	} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			_, stderr, err := leader.Run(t.Context(), "unitlease", "handoff", "demo", "--to", c.to.Name)
			if err == nil {
				t.Fatalf("handoff --to %s succeeded", c.to.Name)
			}
			if strings.Contains(stderr, c.says) {
				t.Logf("handoff --to %s: %s", c.to.Name, strings.TrimSpace(stderr))
				break
			}
			// Redis forgets a stopped daemon's subscriptions a moment
			// after its connection closes.
			if time.Now().After(deadline) {
				t.Fatalf("handoff --to %s: %q does not say %q", c.to.Name, stderr, c.says)
			}
		}
		if got := active(t, leader, "demo.service"); got != "active" {
			t.Fatalf("a refused handoff left demo.service %s on %s", got, leader.Name)
		}
	}
	run(t, drained, "unitlease", "undrain")
	d.noViolations()
}

// starts are the nodes the witness started on, in order.
func (d *daemons) starts() []string {
	var s []string
	for _, r := range d.Records() {
		if r.What == "start" {
			s = append(s, r.Node)
		}
	}
	return s
}

// waitStarts waits until the witness has started n times, and returns
// the nodes it started on.
func (d *daemons) waitStarts(n int, limit time.Duration) []string {
	d.t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(50 * time.Millisecond) {
		if s := d.starts(); len(s) >= n || time.Now().After(deadline) {
			return s
		}
	}
}

// TestPreferredNodeWinsAfterACrashAndFailsBack: with Prefer= naming the
// three nodes in order and Failback=yes, the most preferred node leads;
// twice, its power is cut, the second node takes over (never the third,
// which defers to it), and once the first node's daemon is back and has
// been ready for FailbackSettle=, the second hands the lease back to it,
// with a handoff's gap.
func TestPreferredNodeWinsAfterACrashAndFailsBack(t *testing.T) {
	n := []*Node{cluster.Node(0), cluster.Node(1), cluster.Node(2)}
	d := deployOn(t, n)
	t.Cleanup(func() {
		if !n[0].Running() {
			_ = n[0].Boot(context.Background())
		}
	})
	dropIn := fmt.Sprintf("[X-UnitLease]\nPrefer=%s %s %s\nFailback=yes\nFailbackSettle=3s\n", n[0].Name, n[1].Name, n[2].Name)
	for _, node := range n {
		run(t, node, "mkdir", "-p", "/etc/systemd/system/demo.service.d")
		d.write(node, "/etc/systemd/system/demo.service.d/prefer.conf", dropIn)
		run(t, node, "systemctl", "daemon-reload")
	}
	// Whoever took the lease first, it fails back to the first node.
	waitState(t, n[0], "demo.service", "active", 60*time.Second)
	before := len(d.starts())
	for round := range 2 {
		if err := n[0].PowerCut(t.Context()); err != nil {
			t.Fatal(err)
		}
		waitState(t, n[1], "demo.service", "active", 60*time.Second)
		if on := d.Running(t.Context()); len(on) != 1 || on[0] != n[1] {
			t.Fatalf("round %d: after the power cut demo.service runs on %v, want %s alone", round, names(on), n[1].Name)
		}
		if why, _ := lastTransition(t, n[2], n[0], n[1]); why != "crash" {
			t.Fatalf("round %d: the power cut's transition says %q, want crash", round, why)
		}
		if err := n[0].Boot(t.Context()); err != nil {
			t.Fatal(err)
		}
		run(t, n[0], "systemctl", "start", "unitlease.service")
		waitState(t, n[0], "demo.service", "active", 60*time.Second)
		if ev := d.events(n[1]); !has(ev, "failback") {
			t.Fatalf("round %d: %s's events %v lack failback", round, n[1].Name, ev)
		}
		if why, _ := lastTransition(t, n[2], n[1], n[0]); why != "failback" {
			t.Fatalf("round %d: the fail-back's transition says %q", round, why)
		}
		if round == 1 {
			t.Logf("status after the fail-back:\n%s", run(t, n[2], "unitlease", "status"))
		}
		t.Logf("round %d: the power cut moved the lease to %s; it failed back to %s with a gap of %v", round, n[1].Name, n[0].Name, d.lastGap(n[1], n[0]))
	}
	want := []string{n[1].Name, n[0].Name, n[1].Name, n[0].Name}
	if got := d.waitStarts(before+len(want), 10*time.Second)[before:]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("after the first node led, the witness started on %v, want %v", got, want)
	}
	d.noViolations()
}

// lastGap is the time from old's last stop to new's start after it, from
// the witness's records.
func (d *daemons) lastGap(old, new *Node) time.Duration {
	d.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var stopped, started time.Duration = -1, -1
		for _, r := range d.Records() {
			switch {
			case r.What == "stop" && r.Node == old.Name:
				stopped, started = r.At, -1
			case r.What == "start" && r.Node == new.Name && stopped >= 0 && started < 0:
				started = r.At
			}
		}
		if started >= 0 {
			return started - stopped
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("the witness's records show no stop on %s followed by a start on %s: %+v", old.Name, new.Name, d.Records())
		}
	}
}

func names(ns []*Node) []string {
	var s []string
	for _, n := range ns {
		s = append(s, n.Name)
	}
	return s
}

// TestAUnitThatAlwaysFailsRestsReleased: the witness fails two seconds
// after every start. Each node counts its failures (FailureThreshold=3
// by default), excludes itself at the third, and once both have, the
// lease rests released with the event that says so, instead of moving
// back and forth; never two copies at once. unitlease clear lets the
// nodes compete again.
func TestAUnitThatAlwaysFailsRestsReleased(t *testing.T) {
	d := deploy(t, "-fail-after", "2s")
	var resting string
	for deadline := time.Now().Add(3 * time.Minute); resting == ""; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the lease never rested:\n%s", d.journals())
		}
		for _, n := range d.nodes {
			if msg := d.Messages(t.Context(), n, "resting"); msg != "" {
				resting = n.Name + ": " + msg
			}
		}
	}
	t.Logf("%s", resting)
	for _, n := range d.nodes {
		if !has(d.events(n), "excluded") {
			t.Fatalf("%s's events %v lack excluded", n.Name, d.events(n))
		}
		out := run(t, n, "unitlease", "status", "--json")
		var snap struct {
			Leases []struct {
				Failures int  `json:"failures"`
				Excluded bool `json:"excluded"`
			} `json:"leases"`
		}
		if err := json.Unmarshal([]byte(out), &snap); err != nil || len(snap.Leases) != 1 || !snap.Leases[0].Excluded || snap.Leases[0].Failures != 3 {
			t.Fatalf("status on %s: %v\n%s", n.Name, err, out)
		}
		if got := active(t, n, "demo.service"); got == "active" {
			t.Fatalf("demo.service runs on %s after the lease came to rest", n.Name)
		}
	}
	if starts := d.starts(); len(starts) != 6 {
		t.Fatalf("the witness started %d times (%v), want 6: three failures on each node", len(starts), starts)
	}
	if c := statusJSON(t, d.nodes[0]).Cluster; len(c) != 1 || c[0].State != "released" || len(c[0].Failures) != 2 ||
		c[0].Failures[0].Count != 3 || c[0].Failures[1].Count != 3 {
		t.Fatalf("the resting lease's record: %+v, want released, with 3 failures on each node", c)
	}
	t.Logf("status:\n%s", run(t, d.nodes[0], "unitlease", "status"))
	out := run(t, d.nodes[0], "unitlease", "clear", "demo")
	if !strings.Contains(out, "failures forgotten by the 2 daemons watching it") {
		t.Fatalf("clear: %s", out)
	}
	t.Logf("unitlease clear demo:\n%s", out)
	if s := d.waitStarts(7, 60*time.Second); len(s) < 7 {
		t.Fatalf("after clear, no node started the unit again: %v", s)
	}
	d.noViolations()
}

// TestDisableKeepsTheLeaseStoppedAcrossRestarts: unitlease disable on the
// standby stops the unit on the leader (it releases the lease), and no
// node starts it for two lease spans after every daemon restarted;
// status shows the lease disabled; enable lets a node take it again.
func TestDisableKeepsTheLeaseStoppedAcrossRestarts(t *testing.T) {
	d := deploy(t)
	leader, standby := d.leader(60 * time.Second)
	out, stderr, err := standby.Run(t.Context(), "unitlease", "disable", "demo")
	if err != nil || !strings.Contains(out, "lease demo is disabled") || !strings.Contains(out, "released by "+leader.Name) {
		t.Fatalf("disable: %v\n%s%s\n%s", err, out, stderr, d.journals())
	}
	t.Logf("unitlease disable demo:\n%s", out)
	if got := active(t, leader, "demo.service"); got == "active" {
		t.Fatalf("demo.service still runs on %s after disable returned", leader.Name)
	}
	if !strings.Contains(d.journal(leader, "-u", "unitlease.service", "-o", "cat"), "demo.service: stopping (disabled)") {
		t.Fatalf("%s's journal does not say it stopped for the disable:\n%s", leader.Name, d.journals())
	}
	for _, n := range d.nodes {
		run(t, n, "systemctl", "restart", "unitlease.service")
	}
	span := statusJSON(t, leader).Timing.LeaseSpan
	for deadline := time.Now().Add(2*span + 30*time.Second); ; time.Sleep(200 * time.Millisecond) {
		if on := d.Running(t.Context()); len(on) > 0 {
			t.Fatalf("the disabled lease's unit runs on %v\n%s", names(on), d.journals())
		}
		if st := LeaseStatus(t.Context(), standby); st.LeaseAge > 2*span {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never saw the record age two lease spans", standby.Name)
		}
	}
	table := run(t, standby, "unitlease", "status")
	if !strings.Contains(table, "Disabled leases (no node takes them until `unitlease enable`): demo (by "+standby.Name) {
		t.Fatalf("status does not show demo disabled:\n%s", table)
	}
	t.Logf("status while disabled:\n%s", table)
	if out := run(t, leader, "unitlease", "enable", "demo"); !strings.Contains(out, "lease demo is enabled") {
		t.Fatalf("enable: %s", out)
	}
	if _, err := d.Leader(t.Context(), 30*time.Second); err != nil {
		t.Fatalf("after enable: %v\n%s", err, d.journals())
	}
	d.noViolations()
}

// waitSeenHeld waits until n's supervisor of lease has read the record of
// holder's tenure (its status names holder as the holder).
func waitSeenHeld(t *testing.T, n *Node, lease, holder string, limit time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(limit); ; time.Sleep(100 * time.Millisecond) {
		out, _, err := n.Run(t.Context(), "unitlease", "status", "--json")
		var snap struct {
			Leases []struct{ Lease, Holder string }
		}
		if err == nil && json.Unmarshal([]byte(out), &snap) == nil {
			for _, l := range snap.Leases {
				if l.Lease == lease && l.Holder == holder {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has not seen %s hold %s after %v: %v\n%s", n.Name, holder, lease, limit, err, out)
		}
	}
}
