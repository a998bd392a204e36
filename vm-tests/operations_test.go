//go:build linux

package vmtests

import (
	"encoding/json"
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
	} `json:"cluster"`
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
