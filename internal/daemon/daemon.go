// Package daemon is the node: `unitlease run`. It discovers the annotated
// units, reconciles one supervisor per lease with what it found, watches
// the units and the leases' wake-ups, answers the control socket, and
// runs the process (sd_notify, the watchdog, signals, memory).
//
// It is the only package that joins systemd (unitctl) to the supervisors:
// a supervisor sees systemd through supervisor.Units, which the daemon
// adapts from unitctl. The control socket's wire format lives in control,
// which the daemon serves. It owns no decision of its own about a lease
// (those are the policy's, carried out by the supervisor), and nothing
// but cmd/unitlease imports it.
package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/metrics"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// Manager is what the daemon needs of systemd, the service manager:
// *unitctl.Systemd.
type Manager interface {
	Start(ctx context.Context, unit string) error
	// WriteEnv writes the environment file a unit's drop-in names.
	WriteEnv(cfg unitctl.Config, unit string, env [][2]string) error
	Stop(ctx context.Context, unit string, stopWait time.Duration) error
	ActiveState(ctx context.Context, unit string) (string, error)
	State(ctx context.Context, unit string) (unitctl.UnitState, error)
	StartOrder(ctx context.Context, units []string) ([]string, error)
	Discover(ctx context.Context, extra ...string) ([]unitctl.Annotation, []error)
	// ScanLinks reads the unit directories' links once for a batch of
	// Validate calls; nil links (an error) has each read its unit's
	// UnitFileState from systemd.
	ScanLinks(ctx context.Context) (*unitctl.Links, error)
	Validate(ctx context.Context, unit string, cfg unitctl.Config, links *unitctl.Links) (*unitctl.Plan, error)
	Install(ctx context.Context, plans []*unitctl.Plan) (map[string]error, error)
	Recheck(ctx context.Context, plans []*unitctl.Plan) (map[string]error, error)
	Uninstall(ctx context.Context, cfg unitctl.Config, units []string) error
	Watch(ctx context.Context, units []string, interval time.Duration) <-chan unitctl.Event
	TimeoutAbort(ctx context.Context, unit string) (time.Duration, error)
	Watchdog(ctx context.Context, unit string) (time.Duration, error)
	ServiceWatchdogs(ctx context.Context) (bool, error)
	ControlGroup(ctx context.Context, unit string) (string, error)
}

var _ Manager = (*unitctl.Systemd)(nil)

// LeaseStore is what the daemon needs of the lease store
// (*redislease.Store) beyond a supervisor's Records.
type LeaseStore interface {
	supervisor.Records
	Watchers(ctx context.Context, name string) (int, error)
	Wakeups(ctx context.Context, leases []string) <-chan redislease.Wake
	List(ctx context.Context) ([]redislease.Entry, error)
	Durability(ctx context.Context) redislease.Durability
	// Ping: Redis answers within reply_max.
	Ping(ctx context.Context) error
	// What the nodes announce (redislease's presence).
	SetAnnouncements(ctx context.Context, as []redislease.Announcement) error
	Announced(ctx context.Context, lease, node string) (string, error)
	ReadyAmong(ctx context.Context, nodes map[string][]string) (map[string][]string, error)
	Announcements(ctx context.Context) ([]redislease.Announcement, error)
	// Which leases an operator disabled (redislease's Disable).
	DisabledAmong(ctx context.Context, leases []string) (map[string]bool, error)
	DisabledLeases(ctx context.Context) ([]redislease.Disabled, error)
	// The history status shows (redislease's history.go).
	NoteRelease(ctx context.Context, lease string, version uint64, why string) error
	LastRelease(ctx context.Context, lease string) (*redislease.Release, error)
	Releases(ctx context.Context, leases []string) (map[string]redislease.Release, error)
	NoteTransition(ctx context.Context, lease string, t redislease.Transition) error
	Transitions(ctx context.Context, leases []string) (map[string]redislease.Transition, error)
	NoteFailures(ctx context.Context, lease string, count int, window time.Duration) error
	Failures(ctx context.Context) (map[string][]redislease.NodeFailures, error)
}

// Daemon runs the supervisors of every annotated unit on this node.
type Daemon struct {
	cfg    *config.Config
	log    *slog.Logger // with this node's field
	supLog *slog.Logger // for the supervisors, which add the node themselves
	store  LeaseStore
	sd     Manager
	ucfg   unitctl.Config
	clock  supervisor.Clock
	notify func(string)
	// metrics counts for the Prometheus endpoint, or is nil (it is off);
	// set before the first reload (UseMetrics).
	metrics *metrics.Metrics

	again chan struct{} // asks the loop for another reload

	stateDir string      // StateDir, or a test's ("": no drain)
	drained  atomic.Bool // the node takes no lease (Drain)
	asleep   atomic.Bool // the machine is about to sleep: the node takes no lease until it resumed
	// wmu orders every change of what a lease's withdrawal depends on
	// (the drain, the failure exclusions) with the reads that tell the
	// supervisors, and with the birth of a supervisor (add): each
	// supervisor sees the last word, and none starts competing between a
	// drain's read of the supervisors and its own.
	wmu sync.Mutex

	// settings are each lease's annotation keys beyond Lease=, as the
	// last discovery found them; guarded by mu. The leases that set none
	// of them share one value (defaultSettings), never changed: a map of
	// the values was 128 bytes a lease.
	settings map[string]*leaseSettings
	// steering is the preference's state (steer), touched only by it.
	steering   steerState
	steerNow   chan struct{} // asks steerLoop for a round now
	markersDue atomic.Bool   // the next round reads the disabled markers
	steerDone  chan string   // a failback of the lease ended
	// fmu guards failures and excl (failures.go): a leaf lock, taken
	// from a supervisor's step.
	fmu      sync.Mutex
	failures map[string][]time.Time // each lease's failures here, oldest first
	excl     map[string]bool        // the leases this node excluded itself from, as last journalled
	resting  map[string]bool        // the leases whose rest was journalled since this node excluded itself
	disabled map[string]bool        // the leases an operator disabled, as the last round read them
	intents  map[string]string      // why the daemon moves a lease (history.go)
	noted    map[string]int         // the failure counts last noted in Redis

	notes  noteLine // the history notes waiting to be written (history.go)
	nudges workLine // the nudged standbys waiting to step (watch.go)

	mu   sync.Mutex
	sups map[string]*running // by lease
	// byUnit is the supervisor of each unit in sups, for the guard and
	// the watch of every start and stop (a scan of sups would cost each
	// of them the number of leases). A unit belongs to one lease at a
	// time: a lease waits to be added while a unit of it is still being
	// removed under another (notRemoving).
	byUnit map[string]*supervisor.Supervisor
	// units is what every supervisor starts and stops its units with,
	// made by the first add: one, not a copy in each.
	units *unitsOf
	// ended are supervisors no longer in sups whose stop, due by a
	// deadline, systemd did not have yet when they ended: the watchdog
	// keeps reading them until it does.
	ended        []*supervisor.Supervisor
	problems     []string              // config errors of the last discovery
	unitProblems []control.UnitProblem // units refused or misannotated at the last reload
	watchers     context.CancelFunc    // the wake-up and unit watches of the current set

	// phase and validated tell how far a discovery has got, for the
	// STATUS= of a start that reports READY before its first one ends.
	phase     atomic.Pointer[string]
	starting  atomic.Bool  // the first discovery is in progress
	phases    []phaseAt    // the first discovery's, touched only by it
	validated atomic.Int64 // units validated by the discovery in progress
	toCheck   atomic.Int64 // units it validates

	lastStatus  string // the last STATUS= sent by the watchdog loop
	lastOverdue bool   // the watchdog's last tick found a loop overdue
	settling    bool   // it changed since the last FreeOSMemory
	// gcTarget, if set, is told the number of leases in each steady
	// state: Run's sets the collector's target to GCPercent of it.
	gcTarget func(leases int)
}

type running struct {
	sup    *supervisor.Supervisor
	cancel context.CancelFunc
	// removing: the lease is being handed off to be unmanaged; a reload
	// leaves it alone until that is done (it may wait on a failed stop).
	removing bool
}

// New returns a daemon; Run starts it.
func New(cfg *config.Config, log *slog.Logger, store LeaseStore, sd Manager, ucfg unitctl.Config, notify func(string)) *Daemon {
	ucfg.StopWait = cfg.Timing.StopWait
	return &Daemon{cfg: cfg, log: log.With(logging.Node, cfg.Node), supLog: log, store: store, sd: sd, ucfg: ucfg,
		clock: supervisor.BootClock(), notify: notify, sups: map[string]*running{}, byUnit: map[string]*supervisor.Supervisor{}, again: make(chan struct{}, 1),
		steerNow: make(chan struct{}, 1), steerDone: make(chan string)}
}

func (d *Daemon) running() []*running {
	d.mu.Lock()
	defer d.mu.Unlock()
	rs := make([]*running, 0, len(d.sups))
	for _, r := range d.sups {
		rs = append(rs, r)
	}
	return rs
}

func (d *Daemon) supervisors() []*supervisor.Supervisor {
	rs := d.running()
	ss := make([]*supervisor.Supervisor, 0, len(rs))
	for _, r := range rs {
		ss = append(ss, r.sup)
	}
	slices.SortFunc(ss, func(a, b *supervisor.Supervisor) int { return strings.Compare(a.Lease, b.Lease) })
	return ss
}

// summary is the STATUS= line: "leader: vpn.service; standby: db.service",
// or, past SummaryUnits units, the count of each role's units: "leader:
// 2000 units; standby: 3000 units" (systemctl status shows the line; it
// is no list of thousands).
func (d *Daemon) summary() string {
	byRole := map[string][]string{}
	var roles []string
	total := 0
	for _, s := range d.running() {
		role := s.sup.Status().Role
		if _, ok := byRole[role]; !ok {
			roles = append(roles, role)
		}
		byRole[role] = append(byRole[role], s.sup.Units...)
		total += len(s.sup.Units)
	}
	slices.Sort(roles)
	var parts []string
	for _, role := range roles {
		units := byRole[role]
		if total > SummaryUnits {
			parts = append(parts, fmt.Sprintf("%s: %d %s", role, len(units), plural(len(units), "unit")))
			continue
		}
		slices.Sort(units)
		parts = append(parts, role+": "+strings.Join(units, ", "))
	}
	if len(parts) == 0 {
		return "no annotated units"
	}
	return strings.Join(parts, "; ")
}

// plural is word for n of them: "unit", "units".
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// SummaryUnits is how many units STATUS= names one by one.
const SummaryUnits = 20

// find returns the supervisor of a lease, or of the lease a unit belongs to.
func (d *Daemon) find(target string) *supervisor.Supervisor {
	for _, s := range d.supervisors() {
		if s.Lease == target {
			return s
		}
	}
	return d.supervisorOf(target)
}

// target resolves what `unitlease handoff` names: a lease by its name
// first, then a unit by its name when no lease has that name. Two leases
// may be named after each other's units: each is still reached by its
// own name, and the rule is one a user can read in the man page.
func (d *Daemon) target(name string) (*supervisor.Supervisor, error) {
	for _, s := range d.supervisors() {
		if s.Lease == name {
			return s, nil
		}
	}
	if s := d.supervisorOf(name); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("%s: %w", name, ErrNotManaged)
}

// supervisorOf returns the supervisor of the lease unit belongs to.
func (d *Daemon) supervisorOf(unit string) *supervisor.Supervisor {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byUnit[unit]
}
