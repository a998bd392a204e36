package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/control"
)

// fixtureSnapshot is a node holding a group lease of two units and standing
// by for another whose unit state could not be read.
func fixtureSnapshot() control.Snapshot {
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	return control.Snapshot{
		Node: "node-a",
		Leases: []control.LeaseStatus{{
			Lease:        "db",
			Units:        []string{"postgresql.service", "db-backup.timer"},
			Node:         "node-a",
			Role:         "leader",
			Holding:      true,
			Holder:       "node-a",
			Version:      12,
			LeaseAge:     1249 * time.Millisecond, // 1.2s
			DeadlineLeft: 8750 * time.Millisecond, // 8.8s
			UnitStates:   []string{"active", "activating"},
			Since:        since,
		}, {
			Lease:        "web",
			Units:        []string{"nginx.service"},
			Node:         "node-a",
			Role:         "standby",
			Holder:       "node-b",
			Version:      7,
			LeaseAge:     42049 * time.Millisecond, // 42s
			DeadlineLeft: 3 * time.Second,          // not shown: not holding
			Reason:       "handoff:\tnode-b took over",
			Since:        since.Add(-time.Hour),
			Failures:     3,
			Excluded:     true,
		}},
		Cluster: []control.ClusterRow{
			{Lease: "db", Holder: "node-a", Version: 12, State: "held", Watchers: 2,
				Nodes: []control.NodeState{{Node: "node-a", State: "ready"}, {Node: "node-b", State: "drained"}},
				Token: 9, HeldFor: 5*time.Minute + 3040*time.Millisecond,
				Last:     &control.TransitionRow{At: since, From: "node-b", To: "node-a", Why: "drain"},
				Failures: []control.NodeFailures{{Node: "node-b", Count: 3}}},
			{Lease: "web", Holder: "node-b", Version: 7, State: "held", Watchers: 2},
			{Lease: "cache", Version: 4, State: "released", Watchers: 1, Next: "node-c",
				Released: &control.ReleaseRow{At: since, By: "node-a", Why: "handoff"}},
			{Lease: "queue", State: "missing"},
		},
		Errors:         []string{"redis: GET unitlease:lease:queue: i/o timeout"},
		DrainedNodes:   []string{"node-b"},
		DisabledLeases: []control.DisabledLease{{Lease: "cache", By: "node-c", At: since}},
		Timing: control.TimingSummary{
			LeaseSpan:     15 * time.Second,
			Retry:         2 * time.Second,
			RenewDeadline: 10 * time.Second,
			StopWait:      1500 * time.Millisecond,
		},
	}
}

// fixtureTable is printStatus's output for fixtureSnapshot: durations
// rounded to 100 ms, the standby's deadline and missing unit state shown as
// "-" and "?", empty holders and zero versions as "-", the tab in a reason
// as a space.
const fixtureTable = `Node node-a (lease span 15s, retry 2s, renew deadline 10s, stop wait 1.5s)
LEASE  UNIT                NODE    ROLE     HOLDER  VERSION  LEASE AGE  DEADLINE LEFT  UNIT STATE  REASON
db     postgresql.service  node-a  leader   node-a  12       1.2s       8.8s           active      -
db     db-backup.timer     node-a  leader   node-a  12       1.2s       8.8s           activating  -
web    nginx.service       node-a  standby  node-b  7        42s        -              ?           handoff: node-b took over; excluded here after 3 failures

Cluster (Redis):
LEASE  STATE               HOLDER  TOKEN  HELD FOR  VERSION  WATCHERS  NODES                         LAST TRANSITION                                    FAILURES
db     held                node-a  9      5m3s      12       2         node-a ready, node-b drained  2025-03-01T12:00:00Z node-b -> node-a (drain)      node-b 3
web    held                node-b  -      -         7        2         -                             -                                                  -
cache  released to node-c  -       -      -         4        1         -                             2025-03-01T12:00:00Z node-a released it (handoff)  -
queue  missing             -       -      -         -        0         -                             -                                                  -

Drained nodes (they take no lease): node-b
Disabled leases (no node takes them until ` + "`unitlease enable`" + `): cache (by node-c at 2025-03-01T12:00:00Z)
error: redis: GET unitlease:lease:queue: i/o timeout
`

func TestPrintStatus(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, fixtureSnapshot())
	if got := b.String(); got != fixtureTable {
		t.Errorf("printStatus:\n%s\nwant:\n%s", got, fixtureTable)
	}
}

func TestPrintStatusNoLeases(t *testing.T) {
	const want = `Node node-b (lease span 0s, retry 0s, renew deadline 0s, stop wait 0s)
LEASE  UNIT  NODE  ROLE  HOLDER  VERSION  LEASE AGE  DEADLINE LEFT  UNIT STATE  REASON
(no annotated units on this node: add an [X-UnitLease] section to a unit, then systemctl daemon-reload)

Cluster (Redis):
LEASE  STATE  HOLDER  TOKEN  HELD FOR  VERSION  WATCHERS  NODES  LAST TRANSITION  FAILURES
(no lease in Redis yet: a node writes a lease's key when it first acquires it)
This node is drained: ` + "`unitlease undrain`" + ` lets it take leases again.
`
	var b bytes.Buffer
	printStatus(&b, control.Snapshot{Node: "node-b", Drained: true})
	if got := b.String(); got != want {
		t.Errorf("printStatus:\n%s\nwant:\n%s", got, want)
	}
}

// TestPrintStatusProblems: units refused or misannotated are rows with the
// reason (before, "no annotated units" and the reason only on stderr); a
// refused unit of a lease still managed here adds its reason to the
// lease's row; a lease age is "-" until something was observed.
func TestPrintStatusProblems(t *testing.T) {
	const want = `Node node-b (lease span 0s, retry 0s, renew deadline 0s, stop wait 0s)
LEASE  UNIT          NODE    ROLE     HOLDER  VERSION  LEASE AGE  DEADLINE LEFT  UNIT STATE  REASON
web    web.service   node-b  standby  -       -        -          -              inactive    stopped (ineligible): unitctl: unit refused for management: web.service: enabled
db     db.service    node-b  refused  -       -        -          -              -           unitctl: unit refused for management: db.service: KillMode=process
-      typo.service  node-b  invalid  -       -        -          -              -           /etc/systemd/system/typo.service:9: [X-UnitLease] of typo.service: Lease: empty

Cluster (Redis):
LEASE  STATE  HOLDER  TOKEN  HELD FOR  VERSION  WATCHERS  NODES  LAST TRANSITION  FAILURES
(no lease in Redis yet: a node writes a lease's key when it first acquires it)
`
	snap := control.Snapshot{Node: "node-b",
		Leases: []control.LeaseStatus{{Lease: "web", Units: []string{"web.service"}, Node: "node-b", Role: "standby",
			UnitStates: []string{"inactive"}, Reason: "stopped (ineligible)"}},
		Problems: []control.UnitProblem{
			{Unit: "web.service", Lease: "web", Kind: "refused", Msg: "unitctl: unit refused for management: web.service: enabled"},
			{Unit: "db.service", Lease: "db", Kind: "refused", Msg: "unitctl: unit refused for management: db.service: KillMode=process"},
			{Unit: "typo.service", Kind: "annotation", Msg: "/etc/systemd/system/typo.service:9: [X-UnitLease] of typo.service: Lease: empty"},
		}}
	var b bytes.Buffer
	printStatus(&b, snap)
	if got := b.String(); got != want {
		t.Errorf("printStatus:\n%s\nwant:\n%s", got, want)
	}
}

// TestStatusEscapesWhatRedisNames: a key in Redis may be named with
// escape sequences; status shows them quoted, never raw.
func TestStatusEscapesWhatRedisNames(t *testing.T) {
	var b strings.Builder
	printStatus(&b, control.Snapshot{Node: "n", Cluster: []control.ClusterRow{{Lease: "evil\x1b]0;pwned\x07\x1b[2J", State: "held", Holder: "a"}},
		Errors: []string{"redislease: key \x1b[2J: bad"}})
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `"evil\x1b]0;pwned\a\x1b[2J"`) {
		t.Fatalf("status printed:\n%q", out)
	}
}

// statusJSONKeys are the keys of `unitlease status --json`, schema 1, as
// unitlease(8) documents them.
var statusJSONKeys = []string{
	"schema", "node",
	"leases[].lease", "leases[].units", "leases[].node", "leases[].role", "leases[].holding", "leases[].holder",
	"leases[].version", "leases[].lease_age_ns", "leases[].deadline_left_ns", "leases[].reason", "leases[].unit_states", "leases[].since",
	"leases[].failures", "leases[].excluded",
	"cluster[].lease", "cluster[].holder", "cluster[].version", "cluster[].state", "cluster[].watchers", "cluster[].error",
	"cluster[].next", "cluster[].nodes[].node", "cluster[].nodes[].state", "drained", "drained_nodes",
	"disabled_leases[].lease", "disabled_leases[].by", "disabled_leases[].at",
	"cluster[].token", "cluster[].held_for_ns", "cluster[].last_transition.at", "cluster[].last_transition.from",
	"cluster[].last_transition.to", "cluster[].last_transition.why", "cluster[].failures[].node", "cluster[].failures[].count",
	"cluster[].last_release.at", "cluster[].last_release.by", "cluster[].last_release.why",
	"errors",
	"timing.lease_span_ns", "timing.retry_ns", "timing.renew_deadline_ns", "timing.stop_wait_ns",
	"problems[].unit", "problems[].lease", "problems[].kind", "problems[].msg",
}

// TestStatusJSONSchema pins `status --json`: schema 1 has exactly these
// keys, and unitlease(8) documents each. A change to either fails here
// (and a renamed or removed key needs a new schema version).
func TestStatusJSONSchema(t *testing.T) {
	snap := fixtureSnapshot()
	snap.Schema = control.Schema
	snap.Leases[1].Reason = "x"
	snap.Cluster[0].Error = "x"
	snap.Cluster[0].Next = "x"
	snap.Cluster[0].Released = snap.Cluster[2].Released
	snap.Problems = []control.UnitProblem{{Unit: "u", Lease: "l", Kind: "refused", Msg: "m"}}
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				switch e.(type) {
				case map[string]any, []any:
					if arr, ok := e.([]any); ok && len(arr) > 0 {
						if _, isObj := arr[0].(map[string]any); isObj {
							walk(p+"[]", arr[0])
							continue
						}
					}
					if _, isObj := e.(map[string]any); isObj {
						walk(p, e)
						continue
					}
				}
				got[p] = true
			}
		}
	}
	walk("", v)
	want := map[string]bool{}
	for _, k := range statusJSONKeys {
		want[k] = true
	}
	for k := range got {
		if !want[k] {
			t.Errorf("status --json has %q, which schema %d does not list", k, control.Schema)
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("status --json lacks %q", k)
		}
	}
	if control.Schema != 1 {
		t.Errorf("schema %d: update statusJSONKeys and unitlease(8)", control.Schema)
	}
	man, err := os.ReadFile("../../packaging/man/unitlease.8.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range statusJSONKeys {
		if !strings.Contains(string(man), "**"+k+"**") {
			t.Errorf("unitlease(8) does not document %q", k)
		}
	}
}
