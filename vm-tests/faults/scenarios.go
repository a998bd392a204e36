//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	vmtests "github.com/unitlease/unitlease/vm-tests"
)

// kind says which bound a scenario's gap is measured against.
type kind int

const (
	kCrash    kind = iota // lease span + poll_max + start
	kMissing              // the same + the confirm wait: the key is missing
	kMoved                // the same + poll_max: the new lease ages the old one's release, seen up to a poll late
	kHandoff              // the unit's own stop + start
	kReboot               // the reboot + the crash bound
	kNone                 // no copy may stop
	kRollback             // lease span + poll_max + start, from the lost copy's stop
)

// scenario is one fault, repeated.
type scenario struct {
	name, desc string
	args       string // the witness's arguments
	noAOF      bool   // Redis without persistence
	fsync      string // appendfsync, when not always
	// sentinel: a master, two replicas and three sentinels on the host
	// (sentinelOptions) instead of one Redis; the daemons find the master
	// through the sentinels.
	sentinel bool
	// adjust, when set, changes the profile's timing for this scenario.
	adjust     func(*policy.Timing)
	unitDropIn string // a drop-in of demo.service on every node
	// stopWait, when above the profile's, is this scenario's stop_wait
	// (a unit whose stop has more phases than the profile's fits).
	stopWait time.Duration
	kind     kind
	// fault injects the fault on a cluster where leader runs the copy, sets
	// r.Fault to the host's CLOCK_MONOTONIC just before, and waits until the
	// system has recovered enough for settle.
	fault func(s *session, leader *vmtests.Node, r *Run, m *measured) error
}

// measured is what a fault learns besides the witness log.
type measured struct {
	reboot time.Duration // every node down and up again
	// spread: from the first node's daemon-reload to the last's. Until
	// the last node reloads, a node that still has the old annotation
	// takes the old lease over a release it saw (and gives it back at
	// its own reload): the new lease ages the old one's record from its
	// last change.
	spread time.Duration
	check  func(s *session, r *Run, h Handover)
}

func (sc scenario) target(p profile) Target {
	switch sc.kind {
	case kCrash:
		return Target{Ratio: 1.05, Under: p.under, UnderAdvisory: underAdvisory}
	case kMissing, kMoved, kReboot, kRollback:
		return Target{Ratio: 1.05}
	case kHandoff:
		return Target{Ratio: 1, Slack: 50 * time.Millisecond}
	}
	return Target{NoGap: true}
}

var scenarios = []scenario{
	{name: "handoff", desc: "planned handoff: `unitlease handoff LEASE` on the leader", kind: kHandoff, fault: faultHandoff},
	{name: "guard", desc: "`systemctl start` of the unit on a standby: the guard refuses it", kind: kNone, fault: faultGuard},
	{name: "unit-fails", desc: "the unit fails on the leader (exits with status 1)", kind: kCrash, fault: faultUnitFails},
	{name: "daemon-sigkill", desc: "the leader's daemon is SIGKILLed", kind: kCrash, fault: faultSIGKILL},
	{name: "daemon-sigstop", desc: "the leader's daemon is frozen with SIGSTOP until its watchdog kills it", kind: kCrash, fault: faultSIGSTOP},
	{name: "cut-off", desc: "the leader is cut off from Redis, healed once a peer runs the unit; it rejoins as a standby", kind: kCrash, fault: faultCutOff},
	{name: "ignore-sigterm", desc: "the unit ignores SIGTERM and its leader is cut off: SIGKILL within stop_wait", args: "-on-term ignore", kind: kCrash, fault: faultIgnoreTERM},
	{name: "redis-aof", desc: "Redis (appendonly, appendfsync always) crashes and restarts", kind: kCrash, fault: faultRedisRestart},
	{name: "redis-no-persist", desc: "Redis without persistence crashes and restarts: the key is gone", noAOF: true, kind: kMissing, fault: faultRedisRestart},
	{name: "reannotate", desc: "the annotation changes to a new lease on every node, then daemon-reload", kind: kMoved, fault: faultReannotate},
	{name: "power-cut", desc: "the leader's node loses power; it boots again and rejoins", kind: kCrash, fault: faultPowerCut},
	{name: "reboot-all", desc: "every node is rebooted at once", kind: kReboot, fault: faultRebootAll},
	{name: "override-standby", desc: "`systemctl edit` on a standby empties ExecStartPre= and sets KillMode=process, then `systemctl start` there", kind: kNone, fault: faultOverrideStandby},
	{name: "revert-leader", desc: "`systemctl revert` of the unit on the leader removes its drop-ins", kind: kNone, fault: faultRevertLeader},
	{name: "rolling-reannotate", desc: "the annotation changes to a new lease one node at a time, standbys first", kind: kMoved, fault: faultRollingReannotate},
	{name: "killed-hung-stop", desc: "the leader is cut off and its daemon SIGKILLed just before its deadline; the unit's ExecStop= hangs and it ignores SIGTERM", args: "-on-term ignore",
		unitDropIn: "[Service]\nExecStop=/bin/sleep infinity\n", stopWait: 2 * time.Second, kind: kCrash, fault: faultKilledHungStop},
	{name: "frozen-near-deadline", desc: "the leader is cut off and its daemon frozen (SIGSTOP) just before its deadline", kind: kCrash, fault: faultFrozenNearDeadline},
	{name: "journal-frozen", desc: "journald is frozen on the leader while it is cut off", kind: kCrash, fault: faultJournalFrozen},
	{name: "redis-everysec", desc: "Redis (appendfsync everysec) crashes and loses the leader's last renewals", fsync: "everysec", kind: kCrash, fault: faultEverysec},
	{name: "rollback-handoff", desc: "after a handoff, Redis crashes and keeps the release but loses the acquisition after it", fsync: "everysec", kind: kRollback, fault: faultRollbackHandoff},
	{name: "reset", desc: "garbage is written into the lease key and `unitlease reset` replaces it at once", kind: kRollback, fault: faultReset},
	{name: "sentinel-master-killed", desc: "Sentinel: the master is killed; a replica is promoted within renew_deadline", sentinel: true, adjust: sentinelTiming, kind: kNone, fault: faultSentinelMasterKilled},
	{name: "sentinel-replica-down", desc: "Sentinel: a replica is killed until the sentinels see it down", sentinel: true, adjust: sentinelTiming, kind: kNone, fault: faultSentinelReplicaDown},
	{name: "sentinel-split-brain", desc: "Sentinel: the master is cut off from the sentinels, its replicas and the standbys, not from the leader", sentinel: true, adjust: sentinelTiming, kind: kNone, fault: faultSentinelSplitBrain},
	{name: "sentinel-lagging", desc: "Sentinel: the replicas stop copying, a handoff, then the master dies: the promoted replica lacks the handoff", sentinel: true, adjust: sentinelTiming, kind: kRollback, fault: faultSentinelLagging},
}

// underAdvisory makes the profile's crash failover figure (fast: under
// 3 s) a reported one that fails no run (-crash-under-advisory).
var underAdvisory bool

// env is what every scenario shares: the cluster with the package
// installed, the witness binary and the shared directory.
type env struct {
	ctx                  context.Context
	c                    *vmtests.Cluster
	witness, shared, tmp string
	p                    profile
	leaseSpan            time.Duration // as the daemons report it
}

// session is one scenario's deployment.
type session struct {
	*env
	sc        scenario
	t         policy.Timing             // the profile's, with the scenario's stop_wait
	redis     *redistest.Server         // one Redis, or
	sent      *redistest.Sentinel       // a master, replicas and sentinels
	fronts    map[string]*vmtests.Proxy // by a data server's address: the proxy everyone reaches it through
	d         *vmtests.Deployment
	log       string // the witness log on the host
	lease     string
	cuts      []Cut
	b         bounds
	limit     time.Duration // bound on waiting for a recovery
	problems  []string      // of the current run
	lastStart time.Duration // end of the previous run, host CLOCK_MONOTONIC
	// journalLate is, for a node whose journal stamps what it reads late
	// (journald was frozen), from when: its exit records from then on are
	// left out, and the witness's own stop record ends the copy (a copy
	// without one runs on, and overlaps what follows). Reset every run.
	journalLate map[string]time.Duration
}

func (e *env) scenario(sc scenario, runs int) (res Scenario) {
	res = Scenario{Name: sc.name, Description: sc.desc, Target: sc.target(e.p).String()}
	defer func() { res.Summarize() }()
	logf("=== %s: %s", sc.name, sc.desc)
	s, err := e.ready(sc)
	if err != nil {
		// A cluster that does not come up is reported, and given one
		// more try: the runs are what the scenario judges.
		logf("%s: setting up failed, trying once more: %v", sc.name, err)
		res.SetupRetry = err.Error()
		s, err = e.ready(sc)
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer s.close()
	for i := range runs {
		r, err := s.run(i)
		if r != nil {
			res.Runs = append(res.Runs, *r)
			logf("%s run %d: %s -> %s, gap %v, bound %v (%s), ratio %.3f, overlaps %d, violations %d, copies %d, pass %t %v",
				sc.name, i+1, r.From, r.To, r.Gap.Round(time.Millisecond), r.Bound.Round(time.Millisecond), r.BoundParts, r.Ratio,
				len(r.Overlaps), r.Violations, r.Copies, r.Pass, r.Problems)
		}
		if err != nil {
			res.Error = fmt.Sprintf("run %d: %v", i+1, err)
			logf("%s\n%s", res.Error, s.journals())
			return res
		}
	}
	return res
}

// ready opens the scenario's deployment and waits until it has settled
// (one leader, the others standing by).
func (e *env) ready(sc scenario) (*session, error) {
	s, err := e.open(sc)
	if err != nil {
		return nil, err
	}
	if _, err := s.settle(); err != nil {
		err = fmt.Errorf("%w\n%s", err, s.journals())
		s.close()
		return nil, err
	}
	return s, nil
}

func (e *env) open(sc scenario) (*session, error) {
	// A scenario that failed half-way may have left a node down.
	for _, n := range e.c.Nodes {
		if !n.Running() {
			if err := n.Boot(e.ctx); err != nil {
				return nil, err
			}
		}
	}
	dir, err := os.MkdirTemp(e.tmp, "redis-"+sc.name+"-")
	if err != nil {
		return nil, err
	}
	s := &session{env: e, sc: sc, lease: "demo", log: filepath.Join(e.shared, "witness-"+sc.name+".log")}
	redisAddr := ""
	if sc.sentinel {
		s.sent, s.fronts = runSentinel(dir)
		redisAddr = s.sent.Master().Addr()
	} else {
		s.redis = redistest.Run(dir, redistest.Options{AppendOnly: !sc.noAOF, Fsync: sc.fsync})
		redisAddr = s.redis.Addr()
	}
	t, timing := e.p.t, e.p.timing
	if sc.stopWait > t.StopWait && timing != "" {
		t.StopWait = sc.stopWait
		timing = timingTable(t)
	}
	if sc.adjust != nil {
		sc.adjust(&t)
		timing = timingTable(t)
	}
	s.t = t
	resolved, err := t.Resolved()
	if err != nil {
		s.stopRedis()
		return nil, err
	}
	s.b = bounds{leaseSpan: resolved.LeaseSpan, pollMax: t.PollMax, confirm: t.ConfirmWait()}
	s.limit = 2*(s.b.leaseSpan+s.b.confirm+t.PollMax+t.Retry+t.RenewDeadline+t.StopWait) + time.Minute
	s.d, err = vmtests.DeployPackage(e.ctx, e.c.Nodes, vmtests.PackageOptions{
		Witness: e.witness, RedisAddr: redisAddr, Redis: s.redisTable(), Timing: timing, SharedDir: e.shared,
		WitnessName: "witness-" + sc.name, WitnessArgs: sc.args, Lease: s.lease, ServiceDropIn: e.p.dropIn,
		UnitDropIn: sc.unitDropIn,
	})
	if err != nil {
		s.stopRedis()
		return nil, err
	}
	if e.p.timing == "" && sc.adjust == nil {
		// DeployPackage's default is the tests' timing; this profile is
		// the daemon's defaults: no [timing] table at all.
		if err := s.rewriteConfigWithoutTiming(); err != nil {
			s.close()
			return nil, err
		}
	}
	if span := s.reportedLeaseSpan(); span != 0 && span != s.b.leaseSpan {
		logf("the daemon reports lease span %v, policy derives %v: using the daemon's", span, s.b.leaseSpan)
		s.b.leaseSpan = span
	}
	if sc.stopWait == 0 && sc.adjust == nil { // the profile's own timing
		e.leaseSpan = s.b.leaseSpan
	}
	s.lastStart = monotonic()
	return s, nil
}

// rewriteConfigWithoutTiming leaves the [timing] table out of every node's
// unitlease.toml and restarts the daemons.
func (s *session) rewriteConfigWithoutTiming() error {
	return eachNode(s.c.Nodes, func(n *vmtests.Node) error {
		table := s.redisTable()
		if table == "" {
			table = fmt.Sprintf("url = \"redis://%s/0\"\n", s.d.Proxy(n).Addr())
		}
		conf := fmt.Sprintf("node = %q\n[redis]\n%s", n.Name, table)
		if err := n.WriteFile(s.ctx, "/etc/unitlease/unitlease.toml", []byte(conf), 0o640); err != nil {
			return err
		}
		_, stderr, err := n.Run(s.ctx, "systemctl", "restart", "unitlease.service")
		if err != nil {
			return fmt.Errorf("%s: restart unitlease: %w: %s", n.Name, err, stderr)
		}
		return nil
	})
}

func (s *session) close() {
	s.d.Undeploy(context.WithoutCancel(s.ctx))
	s.stopRedis()
}

func (s *session) stopRedis() {
	if s.sent != nil {
		s.sent.Stop()
		for _, p := range s.fronts {
			p.Close()
		}
	} else {
		s.redis.Stop()
	}
}

// redisTable is unitlease.toml's [redis] table for Sentinel; "" for one
// Redis (DeployPackage writes the URL of each node's proxy).
func (s *session) redisTable() string {
	if s.sent == nil {
		return ""
	}
	var q []string
	for _, a := range s.sent.Addrs() {
		q = append(q, strconv.Quote(a))
	}
	return fmt.Sprintf("sentinels = [%s]\nmaster_name = %q\n", strings.Join(q, ", "), s.sent.Name)
}

// reportedLeaseSpan asks a daemon for the lease span in force.
func (s *session) reportedLeaseSpan() time.Duration {
	for _, n := range s.c.Nodes {
		out, _, err := n.Run(s.ctx, "unitlease", "status", "--json")
		if err != nil {
			continue
		}
		var snap struct {
			Timing struct {
				LeaseSpan time.Duration `json:"lease_span_ns"`
			}
		}
		if json.Unmarshal([]byte(out), &snap) == nil && snap.Timing.LeaseSpan > 0 {
			return snap.Timing.LeaseSpan
		}
	}
	return 0
}

// run is one repetition: settle, the fault, recovery, settle, measure.
func (s *session) run(i int) (*Run, error) {
	began := time.Now()
	s.problems = nil
	s.journalLate = map[string]time.Duration{}
	leader, err := s.settle()
	if err != nil {
		return nil, err
	}
	r := &Run{Index: i + 1}
	var m measured
	err = s.sc.fault(s, leader, r, &m)
	if err == nil {
		_, err = s.settle()
	}
	end := monotonic()
	if r.Fault != 0 {
		s.measure(r, &m, end)
	}
	r.Took = time.Since(began)
	s.lastStart = end
	if err != nil {
		r.Problems = append(r.Problems, err.Error())
		r.Pass = false
		return r, err
	}
	return r, nil
}

// measure reads the witness log and systemd, and judges the run.
func (s *session) measure(r *Run, m *measured, end time.Duration) {
	data, err := os.ReadFile(s.log)
	if err != nil {
		s.problem("reading the witness log: %v", err)
	}
	rs := append(ParseLog(data), s.journalExits()...)
	copies := Copies(rs, s.cuts)
	var window []Copy
	for _, c := range copies {
		if c.Start <= end && c.lastEnd() >= s.lastStart {
			window = append(window, c)
		}
	}
	for _, o := range Overlaps(window) {
		r.Overlaps = append(r.Overlaps, o.String())
	}
	for _, rec := range rs {
		if rec.What == recViolation && rec.At >= s.lastStart && rec.At <= end {
			r.Violations++
		}
	}
	h := HandoverAfter(copies, r.Fault)
	r.From, r.To, r.Moved, r.Gap, r.LogCopies = h.From, h.To, h.Moved, h.Gap, h.Running
	r.Copies = len(s.d.Running(s.ctx))
	if h.Moved {
		start := s.activation(h)
		switch s.sc.kind {
		case kCrash, kRollback:
			r.Bound, r.BoundParts = s.b.crash(start)
		case kMissing:
			r.Bound, r.BoundParts = s.b.missing(start)
		case kMoved:
			r.Bound, r.BoundParts = s.b.moved(start, m.spread)
		case kReboot:
			r.Bound, r.BoundParts = s.b.reboot(m.reboot, start)
		case kHandoff:
			r.Bound, r.BoundParts = handoffBound(s.deactivation(h.From, h.Start), start)
		}
	}
	if s.sc.kind == kRollback && h.Moved && h.Start-r.Fault < s.b.leaseSpan {
		// Every node reads the rolled-back (or reset) record only after
		// the fault, and must age it for a lease span.
		s.problem("the new copy started %v after the fault, within the lease span %v: a node took the record without aging it",
			(h.Start - r.Fault).Round(time.Millisecond), s.b.leaseSpan)
	}
	if m.check != nil {
		m.check(s, r, h)
	}
	r.Problems = append(r.Problems, s.problems...)
	r.Judge(s.sc.target(s.p))
	r.Events = s.daemonEvents(s.lastStart)
}

// daemonEvents lists every node's unitlease.service journal entries
// logged since from (CLOCK_MONOTONIC), in order, as "monotonic node message".
func (s *session) daemonEvents(from time.Duration) []string {
	type entry struct {
		at   time.Duration
		line string
	}
	var es []entry
	for _, n := range s.c.Nodes {
		if !n.Running() {
			continue
		}
		out, _, _ := n.Run(s.ctx, "journalctl", "--no-pager", "-n", "300", "-o", "json", "-u", "unitlease.service",
			"--output-fields=MESSAGE,UNITLEASE_EVENT,UNITLEASE_LEASE")
		for _, line := range strings.Split(out, "\n") {
			var e struct {
				Mono  string `json:"__MONOTONIC_TIMESTAMP"`
				Msg   any    `json:"MESSAGE"`
				Event string `json:"UNITLEASE_EVENT"`
				Lease string `json:"UNITLEASE_LEASE"`
			}
			if json.Unmarshal([]byte(line), &e) != nil {
				continue
			}
			us, _ := strconv.ParseInt(e.Mono, 10, 64)
			at := time.Duration(us) * time.Microsecond
			msg, _ := e.Msg.(string)
			if at < from {
				continue
			}
			if e.Event != "" {
				msg = fmt.Sprintf("[%s %s] %s", e.Event, e.Lease, msg)
			}
			es = append(es, entry{at, fmt.Sprintf("%.6f %s %s", at.Seconds(), n.Name, msg)})
		}
	}
	slices.SortStableFunc(es, func(a, b entry) int { return int(a.at - b.at) })
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.line
	}
	return lines
}

func (s *session) problem(format string, args ...any) {
	s.problems = append(s.problems, fmt.Sprintf(format, args...))
}

func (s *session) node(name string) *vmtests.Node {
	for _, n := range s.c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// monoProps reads *TimestampMonotonic properties (µs) of demo.service.
func (s *session) monoProps(n *vmtests.Node, props ...string) []time.Duration {
	m, err := vmtests.UnitProps(s.ctx, n, "demo.service", props...)
	if err != nil {
		s.problem("%v", err)
	}
	out := make([]time.Duration, len(props))
	for i, p := range props {
		us, _ := strconv.ParseInt(m[p], 10, 64)
		out[i] = time.Duration(us) * time.Microsecond
	}
	return out
}

// activation is how long systemd took to start the copy running at the
// end: from when it began the start job (ConditionTimestamp: conditions
// are checked first, before the cgroup is set up and the guard forked) to
// the witness's start record. Leaving inactive comes later, after the
// fork: from there the start would leave out systemd's own work, which
// any `systemctl start` of the unit pays too.
func (s *session) activation(h Handover) time.Duration {
	n := s.node(h.To)
	if n == nil {
		return 0
	}
	p := s.monoProps(n, "ConditionTimestampMonotonic", "InactiveExitTimestampMonotonic")
	began, left := p[0], p[1]
	if began <= 0 || began > left || left > h.Start || h.Start-began > time.Minute {
		s.problem("cannot measure the start on %s: conditions checked at %v, left inactive at %v, witness start %v", h.To, began, left, h.Start)
		return 0
	}
	return h.Start - began
}

// systemd's journal entries that a unit's processes are gone: "Deactivated
// successfully", "Failed with result", "Stopped".
var exitIDs = []string{"7ad2d189f7e94e70a38c781354912448", "d9b373ed55a64feb8242e02dbe79a49c", "9d1aaa27d60140bd96365438aad20286"}

// journalExits reads demo.service's ends from every running node's
// journal as exit records.
func (s *session) journalExits() []Record {
	var rs []Record
	for _, n := range s.c.Nodes {
		if !n.Running() {
			continue
		}
		for _, e := range s.unitJournal(n) {
			if slices.Contains(exitIDs, e.id) {
				if from, ok := s.journalLate[n.Name]; ok && e.at > from {
					continue
				}
				rs = append(rs, Record{What: recExit, Node: n.Name, At: e.at})
			}
		}
	}
	return rs
}

type journalEntry struct {
	id string
	at time.Duration // CLOCK_MONOTONIC
}

// unitJournal is demo.service's entries from systemd in n's journal.
func (s *session) unitJournal(n *vmtests.Node) []journalEntry {
	out, _, err := n.Run(s.ctx, "journalctl", "--no-pager", "-o", "json", "--output-fields=MESSAGE_ID", "UNIT=demo.service")
	if err != nil {
		s.problem("%s: journalctl: %v", n.Name, err)
	}
	var es []journalEntry
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			ID   string `json:"MESSAGE_ID"`
			Mono string `json:"__MONOTONIC_TIMESTAMP"`
		}
		if json.Unmarshal([]byte(line), &e) != nil || e.ID == "" {
			continue
		}
		us, _ := strconv.ParseInt(e.Mono, 10, 64)
		es = append(es, journalEntry{e.ID, time.Duration(us) * time.Microsecond})
	}
	return es
}

// deactivation is how long systemd took to stop the unit on node the
// last time before the moment before: from its "Stopping" to its "Stopped"
// journal entries. (An inactive unit's timestamps are gone once systemd
// unloads it.)
func (s *session) deactivation(node string, before time.Duration) time.Duration {
	n := s.node(node)
	if n == nil {
		return 0
	}
	const stopping, stopped = "de5b426a63be47a7b6ac3eaac82e2f6f", "9d1aaa27d60140bd96365438aad20286"
	var from, to time.Duration
	for _, e := range s.unitJournal(n) {
		switch {
		case e.id == stopping && e.at <= before:
			from, to = e.at, 0
		case e.id == stopped && from > 0 && to == 0:
			to = e.at
		}
	}
	if from == 0 || to < from {
		s.problem("cannot measure the stop on %s: Stopping at %v, Stopped at %v", node, from, to)
		return 0
	}
	return to - from
}

// settle waits until every node is up with its daemon active, exactly one
// runs the unit as the leader and the others are standbys (not backing
// off), and returns the leader.
func (s *session) settle() (*vmtests.Node, error) {
	deadline := time.Now().Add(s.limit)
	for {
		leader, why := s.stable()
		if leader != nil {
			return leader, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("not settled after %v: %s", s.limit, why)
		}
		if err := s.pause(100 * time.Millisecond); err != nil {
			return nil, err
		}
	}
}

func (s *session) stable() (*vmtests.Node, string) {
	var leader *vmtests.Node
	for _, n := range s.c.Nodes {
		if !n.Running() {
			return nil, n.Name + " is down"
		}
		if a := vmtests.Active(s.ctx, n, "unitlease.service"); a != "active" {
			return nil, n.Name + ": unitlease.service is " + a
		}
		st := vmtests.LeaseStatus(s.ctx, n)
		on := vmtests.Active(s.ctx, n, "demo.service") == "active"
		switch {
		case on && st.Role == "leader" && st.Holding:
			if leader != nil {
				return nil, "two leaders: " + leader.Name + " and " + n.Name
			}
			leader = n
		case !on && st.Role == "standby":
		default:
			return nil, fmt.Sprintf("%s is %s with demo.service active %t", n.Name, st.Role, on)
		}
	}
	if leader == nil {
		return nil, "no leader"
	}
	return leader, ""
}

// stillActive reads the nodes a scan found demo.service active on again,
// in the reverse order, and reports whether it is still active on every
// one. A scan reads the nodes one after the other, each read taking tens
// of milliseconds on a loaded machine: a unit that stopped on the first
// node just after its read, and started on the last just before its,
// shows active on both though it never ran on two at once (a reannotate
// run saw it so: stopped at +305 ms on one node, started at +475 ms on
// another, the witness counting no overlap). Read backwards, a node whose
// unit stopped meanwhile is read last, and shows it. Overlaps of the
// units' processes are the witness's to count, however short.
func (s *session) stillActive(on []*vmtests.Node) bool {
	for i := len(on) - 1; i >= 0; i-- {
		if vmtests.Active(s.ctx, on[i], "demo.service") != "active" {
			return false
		}
	}
	return true
}

func (s *session) pause(d time.Duration) error {
	select {
	case <-s.ctx.Done():
		return s.ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// waitFor polls until ok holds, noting any moment at which systemd shows
// the unit active on more than one node.
func (s *session) waitFor(what string, ok func(on []*vmtests.Node) bool) error {
	deadline := time.Now().Add(s.limit)
	seenTwo := false
	for {
		on := s.d.Running(s.ctx)
		if len(on) > 1 && !seenTwo && s.stillActive(on) {
			seenTwo = true
			s.problem("systemd showed demo.service active on %d nodes at once", len(on))
		}
		if ok(on) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %v (demo.service active on %d nodes)", what, s.limit, len(on))
		}
		if err := s.pause(50 * time.Millisecond); err != nil {
			return err
		}
	}
}

// waitMoved waits until exactly one node other than from runs the unit.
func (s *session) waitMoved(from *vmtests.Node) error {
	return s.waitFor("the unit running on another node than "+from.Name, func(on []*vmtests.Node) bool {
		return len(on) == 1 && on[0] != from
	})
}

// waitRestarted waits until exactly one copy runs and, by the witness log,
// it started after the fault.
func (s *session) waitRestarted(fault time.Duration) error {
	return s.waitFor("a copy started after the fault", func(on []*vmtests.Node) bool {
		if len(on) != 1 {
			return false
		}
		data, _ := os.ReadFile(s.log)
		h := HandoverAfter(Copies(ParseLog(data), s.cuts), fault)
		return h.Moved && h.Running == 1
	})
}

func (s *session) others(leader *vmtests.Node) []*vmtests.Node {
	var o []*vmtests.Node
	for _, n := range s.c.Nodes {
		if n != leader {
			o = append(o, n)
		}
	}
	return o
}

// journals is every node's daemon journal since the deployment, for an
// error that ends a scenario.
func (s *session) journals() string {
	var b strings.Builder
	for _, n := range s.c.Nodes {
		if n.Running() {
			fmt.Fprintf(&b, "--- %s\n%s", n.Name, lastLines(s.d.Journal(context.WithoutCancel(s.ctx), n, "-u", "unitlease.service", "-o", "short-monotonic"), 40))
		}
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n") + "\n"
}

func monotonic() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// run runs a command in n and returns an error with its stderr.
func (s *session) runIn(n *vmtests.Node, args ...string) (string, error) {
	out, stderr, err := n.Run(s.ctx, args...)
	if err != nil {
		return out, fmt.Errorf("%s: %s: %w: %s", n.Name, strings.Join(args, " "), err, strings.TrimSpace(stderr))
	}
	return strings.TrimSpace(out), nil
}

// The faults.

func faultHandoff(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	r.Fault = monotonic()
	if _, err := s.runIn(leader, "unitlease", "handoff", s.lease); err != nil {
		return err
	}
	return s.waitMoved(leader)
}

func faultGuard(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	standby := s.others(leader)[0]
	before := countEvent(s.d.Events(s.ctx, standby), "refused")
	r.Fault = monotonic()
	if _, _, err := standby.Run(s.ctx, "systemctl", "start", "demo.service"); err == nil {
		s.problem("systemctl start demo.service on the standby %s succeeded", standby.Name)
	}
	if got := countEvent(s.d.Events(s.ctx, standby), "refused"); got <= before {
		s.problem("the standby %s logged no refused event", standby.Name)
	}
	return nil
}

func countEvent(evs []string, e string) int {
	n := 0
	for _, x := range evs {
		if x == e {
			n++
		}
	}
	return n
}

func faultUnitFails(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	r.Fault = monotonic()
	if _, err := s.runIn(leader, "systemctl", "kill", "--kill-who=main", "--signal=SIGUSR1", "demo.service"); err != nil {
		return err
	}
	return s.waitMoved(leader)
}

func faultSIGKILL(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	r.Fault = monotonic()
	if _, err := s.runIn(leader, "systemctl", "kill", "--signal=SIGKILL", "unitlease.service"); err != nil {
		return err
	}
	return s.waitMoved(leader)
}

func faultSIGSTOP(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	pid, err := s.runIn(leader, "systemctl", "show", "-P", "MainPID", "unitlease.service")
	if err != nil {
		return err
	}
	cursor := s.cursor(leader)
	r.Fault = monotonic()
	if _, err := s.runIn(leader, "kill", "-STOP", pid); err != nil {
		return err
	}
	if err := s.waitMoved(leader); err != nil {
		return err
	}
	m.check = func(s *session, r *Run, h Handover) {
		out, _, _ := leader.Run(s.ctx, "journalctl", "--no-pager", "-o", "cat", "--after-cursor", cursor, "-u", "unitlease.service")
		if !strings.Contains(out, "Watchdog timeout") {
			s.problem("%s's journal does not show the watchdog killing the frozen daemon", leader.Name)
		}
	}
	return nil
}

func (s *session) cursor(n *vmtests.Node) string {
	out, _, _ := n.Run(s.ctx, "journalctl", "-n", "0", "--show-cursor", "--no-pager")
	_, c, _ := strings.Cut(out, "-- cursor: ")
	return strings.TrimSpace(c)
}

func faultCutOff(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	p := s.d.Proxy(leader)
	r.Fault = monotonic()
	p.Cut()
	err := s.waitMoved(leader)
	p.Heal()
	return err
}

func faultIgnoreTERM(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	if err := faultCutOff(s, leader, r, m); err != nil {
		return err
	}
	m.check = func(s *session, r *Run, h Handover) {
		stop := s.deactivation(leader.Name, h.Start)
		if stop > s.t.StopWait {
			s.problem("the unit ignoring SIGTERM took %v to stop on %s, above stop_wait %v", stop, leader.Name, s.t.StopWait)
		}
		// systemd's SIGKILL (its stop phase ran out) is journalled: the
		// stop needed it.
		// (Not journalctl --after-cursor with a match: it skips the first
		// matching entry when the cursor's own does not match.)
		killed := slices.ContainsFunc(s.daemonEvents(r.Fault), func(e string) bool {
			return strings.Contains(e, " "+leader.Name+" [killed ")
		})
		if !killed {
			s.problem("%s's journal has no killed entry for the stop of the unit that ignores SIGTERM", leader.Name)
		}
		r.BoundParts += fmt.Sprintf("; the old copy stopped in %v (stop_wait %v)", stop.Round(time.Millisecond), s.t.StopWait)
	}
	return nil
}

func faultRedisRestart(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	before := vmtests.LeaseStatus(s.ctx, leader).Version
	r.Fault = monotonic()
	s.redis.Restart()
	if s.sc.noAOF {
		return s.waitRestarted(r.Fault)
	}
	// The key survives: the leader renews it again (twice, to be sure the
	// restart is behind), unless the restart took long enough for a peer
	// to take over.
	return s.waitFor("the leader renewing after the restart, or a peer taking over", func(on []*vmtests.Node) bool {
		if len(on) == 1 && on[0] != leader {
			return true
		}
		st := vmtests.LeaseStatus(s.ctx, leader)
		return len(on) == 1 && st.Holding && st.Version >= before+2
	})
}

func faultReannotate(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	lease := fmt.Sprintf("demo-%d", r.Index)
	unit := vmtests.WitnessUnit("witness-"+s.sc.name, s.sc.args, lease)
	r.Fault = monotonic()
	var mu sync.Mutex
	var first, last time.Duration
	if err := eachNode(s.c.Nodes, func(n *vmtests.Node) error {
		if err := n.WriteFile(s.ctx, "/etc/systemd/system/demo.service", []byte(unit), 0o644); err != nil {
			return err
		}
		if _, err := s.runIn(n, "systemctl", "daemon-reload"); err != nil {
			return err
		}
		done := monotonic()
		mu.Lock()
		defer mu.Unlock()
		if first == 0 || done < first {
			first = done
		}
		last = max(last, done)
		return nil
	}); err != nil {
		return err
	}
	m.spread = last - first
	s.lease = lease
	return s.waitRestarted(r.Fault)
}

func faultPowerCut(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	r.Fault = monotonic()
	s.cuts = append(s.cuts, Cut{Node: leader.Name, At: r.Fault})
	if err := leader.PowerCut(s.ctx); err != nil {
		return err
	}
	if err := s.waitMoved(leader); err != nil {
		return err
	}
	return leader.Boot(s.ctx)
}

func faultRebootAll(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	r.Fault = monotonic()
	if err := eachNode(s.c.Nodes, func(n *vmtests.Node) error { return n.Stop(s.ctx) }); err != nil {
		return err
	}
	if err := eachNode(s.c.Nodes, func(n *vmtests.Node) error { return n.Boot(s.ctx) }); err != nil {
		return err
	}
	m.reboot = monotonic() - r.Fault
	return s.waitRestarted(r.Fault)
}

// faultOverrideStandby: an administrator's override on a standby tries to
// drop the guard and weaken the stop; the drop-in sorts after it and
// wins, so `systemctl start` there is refused.
func faultOverrideStandby(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	standby := s.others(leader)[0]
	const override = "/etc/systemd/system/demo.service.d/override.conf"
	if err := standby.WriteFile(s.ctx, override, []byte("[Service]\nExecStartPre=\nKillMode=process\nTimeoutStopSec=5min\n"), 0o644); err != nil {
		return err
	}
	defer func() {
		_, _, _ = standby.Run(s.ctx, "rm", "-f", override)
		_, _, _ = standby.Run(s.ctx, "systemctl", "daemon-reload")
	}()
	if _, err := s.runIn(standby, "systemctl", "daemon-reload"); err != nil {
		return err
	}
	r.Fault = monotonic()
	if _, _, err := standby.Run(s.ctx, "systemctl", "start", "demo.service"); err == nil {
		s.problem("systemctl start demo.service on the standby %s succeeded with an override that empties ExecStartPre=", standby.Name)
	}
	props, err := vmtests.UnitProps(s.ctx, standby, "demo.service", "KillMode", "ExecStartPre")
	if err != nil {
		return err
	}
	if props["KillMode"] != "control-group" && props["KillMode"] != "mixed" || !strings.Contains(props["ExecStartPre"], "unitlease") {
		s.problem("the override beat the drop-in on %s: KillMode=%s, ExecStartPre=%s", standby.Name, props["KillMode"], props["ExecStartPre"])
	}
	return nil
}

// faultRevertLeader: `systemctl revert` deletes the runtime drop-in under
// the running unit; the daemon writes it again at the reload, and the
// unit runs on.
func faultRevertLeader(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	r.Fault = monotonic()
	if _, err := s.runIn(leader, "systemctl", "revert", "demo.service"); err != nil {
		return err
	}
	return s.waitFor("the drop-in back in effect on "+leader.Name, func(on []*vmtests.Node) bool {
		props, err := vmtests.UnitProps(s.ctx, leader, "demo.service", "BindsTo", "ExecStartPre")
		return err == nil && strings.Contains(props["BindsTo"], "unitlease.service") && strings.Contains(props["ExecStartPre"], "unitlease")
	})
}

// faultRollingReannotate: configuration management moves the unit to a
// new lease one node at a time, the standbys first, each given longer than
// a lease span before the next: a standby with the new lease must not
// start the unit while the old leader still runs it under the old one.
func faultRollingReannotate(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	lease := fmt.Sprintf("demo-rolling-%d", r.Index)
	unit := vmtests.WitnessUnit("witness-"+s.sc.name, s.sc.args, lease)
	r.Fault = monotonic()
	for _, n := range append(s.others(leader), leader) {
		if err := n.WriteFile(s.ctx, "/etc/systemd/system/demo.service", []byte(unit), 0o644); err != nil {
			return err
		}
		if _, err := s.runIn(n, "systemctl", "daemon-reload"); err != nil {
			return err
		}
		if n != leader {
			if err := s.pause(2*s.b.leaseSpan + s.b.confirm); err != nil {
				return err
			}
		}
	}
	s.lease = lease
	return s.waitFor("one copy under the new lease", func(on []*vmtests.Node) bool {
		return len(on) == 1 && vmtests.LeaseStatus(s.ctx, on[0]).Holding
	})
}

// nearDeadline cuts leader off from Redis and returns once its deadline
// is about margin away, by its own status.
func (s *session) nearDeadline(leader *vmtests.Node, margin time.Duration) (left time.Duration, err error) {
	asked := time.Now()
	st := vmtests.LeaseStatus(s.ctx, leader)
	if !st.Holding || st.DeadlineLeft <= 0 {
		return 0, fmt.Errorf("%s does not hold the lease (%+v)", leader.Name, st)
	}
	deadline := asked.Add(st.DeadlineLeft)
	if wait := time.Until(deadline) - margin; wait > 0 {
		time.Sleep(wait)
	}
	return time.Until(deadline), nil
}

// faultFrozenNearDeadline: cut off, the daemon freezes just before it
// would stop the unit itself; its watchdog kills it, and BindsTo= stops
// the unit, within the allowance the lease span covers.
func faultFrozenNearDeadline(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	pid, err := s.runIn(leader, "systemctl", "show", "-P", "MainPID", "unitlease.service")
	if err != nil {
		return err
	}
	p := s.d.Proxy(leader)
	r.Fault = monotonic()
	p.Cut()
	defer p.Heal()
	left, err := s.nearDeadline(leader, 150*time.Millisecond)
	if err != nil {
		return err
	}
	if _, err := s.runIn(leader, "kill", "-STOP", strings.TrimSpace(pid)); err != nil {
		return err
	}
	r.BoundParts += fmt.Sprintf("; frozen about %v before its deadline", left.Round(time.Millisecond))
	return s.waitMoved(leader)
}

// faultKilledHungStop: cut off, the daemon is SIGKILLed just before its
// deadline; systemd alone stops the unit (BindsTo=), through an ExecStop=
// that hangs and a main process that ignores SIGTERM, within stop_wait.
func faultKilledHungStop(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	p := s.d.Proxy(leader)
	r.Fault = monotonic()
	p.Cut()
	defer p.Heal()
	left, err := s.nearDeadline(leader, 150*time.Millisecond)
	if err != nil {
		return err
	}
	killed := monotonic()
	if _, err := s.runIn(leader, "systemctl", "kill", "--signal=SIGKILL", "unitlease.service"); err != nil {
		return err
	}
	r.BoundParts += fmt.Sprintf("; killed about %v before its deadline", left.Round(time.Millisecond))
	if err := s.waitMoved(leader); err != nil {
		return err
	}
	m.check = func(s *session, r *Run, h Handover) {
		if stopped := s.deactivation(leader.Name, h.Start); stopped > 0 {
			r.BoundParts += fmt.Sprintf("; the old copy stopped in %v (stop_wait %v)", stopped.Round(time.Millisecond), s.t.StopWait)
			if stopped > s.t.StopWait {
				s.problem("systemd took %v to stop the unit on %s once the daemon was killed at %v, above stop_wait %v", stopped, leader.Name, killed, s.t.StopWait)
			}
		}
	}
	return nil
}

// faultJournalFrozen: journald stops reading on the leader while it is
// cut off: the daemon's journal entries must not hold back its stop.
func faultJournalFrozen(s *session, leader *vmtests.Node, r *Run, m *measured) error {
	if _, err := s.runIn(leader, "systemctl", "kill", "--signal=SIGSTOP", "systemd-journald.service"); err != nil {
		return err
	}
	defer func() {
		_, _, _ = leader.Run(s.ctx, "systemctl", "kill", "--signal=SIGCONT", "systemd-journald.service")
	}()
	p := s.d.Proxy(leader)
	r.Fault = monotonic()
	s.journalLate[leader.Name] = r.Fault
	p.Cut()
	defer p.Heal()
	return s.waitMoved(leader)
}
