// Package metrics is the daemon's Prometheus endpoint. What happens to a
// lease (Redis's answers, the journal's events) is counted as it happens,
// by a Lease each supervisor is given as its meter; what a lease and the
// node are (role, token, age, deadline, Redis's reachability and
// durability) is read from the daemon at each scrape, so an unscraped
// daemon pays nothing for it. It decides nothing: the counts are notes.
//
// Every name is in Names, which the dashboard's and the alert rules'
// tests read. The labels are the lease and the unit, never a version or
// a token; a lease has six series (eight where it is held, one more per
// unit beyond the first): what a dashboard's row and the rules need. Rare events (a failed stop, a
// kill, a unit's failure, garbage) are counted by node: the journal
// names the lease.
package metrics

import (
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// Source is what a scrape reads: the daemon.
type Source interface {
	// Leases is every lease this node manages, as its supervisor last
	// stepped.
	Leases() []LeaseView
	// Drained reports whether the node is drained.
	Drained() bool
	// RedisUp pings Redis, within reply_max.
	RedisUp(ctx context.Context) bool
	// RedisDurable reports whether Redis can lose no write it has
	// acknowledged (INFO and CONFIG GET, within reply_max).
	RedisDurable(ctx context.Context) bool
}

// LeaseView is one lease at a scrape.
type LeaseView struct {
	Lease string
	Units []string
	// Holding: this node holds the lease. Competing: it does not, and
	// may take it (not withdrawn, excluded, ineligible or disabled).
	Holding, Competing bool
	StopFailed         bool // the node could not stop the units; it keeps the lease held
	Disabled           bool // an operator disabled the lease cluster-wide
	Token              uint64
	Age                time.Duration // since the last renewal (holder) or the record's last change (others)
	DeadlineLeft       time.Duration // holder: left before it must stop
}

// Options are a daemon's fixed facts.
type Options struct {
	Version    string
	LeaseSpan  time.Duration
	CrashBound time.Duration // policy.Timing.CrashBound
	// DurableEvery is how long a reading of Redis's durability is kept
	// (default a minute): it costs two requests.
	DurableEvery time.Duration
	// Now is the clock of that cache (default time.Now).
	Now func() time.Time
}

// The metric names, without the namespace's prefix.
const (
	nsPrefix = "unitlease_"

	nameRole          = nsPrefix + "lease_role"
	nameToken         = nsPrefix + "lease_token"
	nameAge           = nsPrefix + "lease_age_seconds"
	nameDeadline      = nsPrefix + "lease_deadline_seconds"
	nameStopFailed    = nsPrefix + "lease_stop_failed"
	nameDisabled      = nsPrefix + "lease_disabled"
	nameUnit          = nsPrefix + "unit_info"
	nameAcquisitions  = nsPrefix + "acquisitions_total"
	nameLosses        = nsPrefix + "losses_total"
	nameHandoffs      = nsPrefix + "handoffs_total"
	nameStopFailures  = nsPrefix + "stop_failures_total"
	nameKills         = nsPrefix + "kills_total"
	nameUnitFailures  = nsPrefix + "unit_failures_total"
	nameGarbage       = nsPrefix + "garbage_records_total"
	nameRenewSeconds  = nsPrefix + "renewal_duration_seconds"
	nameRenewFailures = nsPrefix + "renewal_failures_total"
	nameAcquireSecs   = nsPrefix + "acquisition_duration_seconds"
	nameServerChanges = nsPrefix + "redis_server_changes_total"
	nameRedisUp       = nsPrefix + "redis_up"
	nameRedisDurable  = nsPrefix + "redis_durable"
	nameDrained       = nsPrefix + "node_drained"
	nameLeaseSpan     = nsPrefix + "lease_span_seconds"
	nameCrashBound    = nsPrefix + "failover_bound_seconds"
	nameLeases        = nsPrefix + "leases"
	nameBuild         = nsPrefix + "build_info"
)

// Names is every metric this package exports (histograms by their base
// name), besides the Go runtime's and the process's.
var Names = []string{
	nameRole, nameToken, nameAge, nameDeadline, nameStopFailed, nameDisabled, nameUnit,
	nameAcquisitions, nameLosses, nameHandoffs, nameStopFailures, nameKills, nameUnitFailures, nameGarbage,
	nameRenewSeconds, nameRenewFailures, nameAcquireSecs, nameServerChanges,
	nameRedisUp, nameRedisDurable, nameDrained, nameLeaseSpan, nameCrashBound, nameLeases, nameBuild,
}

// latencyBuckets span a Redis on loopback (under a millisecond) to a
// reply_max of seconds.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// Metrics is a daemon's registry.
type Metrics struct {
	src Source
	opt Options

	// By node: rare events the journal names the lease of.
	stopFailures, kills, unitFailures, garbage, renewFailures, serverChanges counter
	renewSeconds, acquireSeconds                                             *histogram

	smu    sync.Mutex
	server string // the identity of the Redis server that answered last; guarded by smu

	lmu    sync.Mutex
	leases map[string]*Lease // the meters of the leases managed; guarded by lmu

	dmu       sync.Mutex
	durable   bool      // guarded by dmu
	durableAt time.Time // when durable was read; zero: never

	proc      string        // the process's directory in /proc (process_linux.go)
	startTime atomic.Uint64 // the process's start, as float64 bits, once read; 0: not yet
}

// New returns the registry of a daemon whose leases src shows.
func New(src Source, opt Options) *Metrics {
	if opt.DurableEvery == 0 {
		opt.DurableEvery = time.Minute
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Metrics{
		src: src, opt: opt, leases: map[string]*Lease{}, proc: procSelf,
		renewSeconds:   newHistogram(latencyBuckets),
		acquireSeconds: newHistogram(latencyBuckets),
	}
}

// WriteTo writes what the endpoint serves, the node's families and the
// leases', in the text format (version 0.0.4), sorted by name, as it
// reads them (families.go). It returns the bytes written and the first
// error of w's; what would follow that error is not written.
func (m *Metrics) WriteTo(w io.Writer) (int64, error) {
	r := m.read()
	tw := &textWriter{w: w, b: make([]byte, 0, flushAt+4<<10)}
	i := 0
	node := func(before string) {
		for ; i < len(nodeFamilies) && (before == "" || nodeFamilies[i].name < before); i++ {
			f := &nodeFamilies[i]
			tw.pending = f.family
			f.write(tw, m, &r)
			tw.pending = family{}
		}
	}
	m.writeLeases(tw, node)
	node("")
	err := tw.flush()
	return tw.n, err
}

// Lease returns the meter of a lease's supervisor (the one it has, if it
// has one); its counters exist, at zero, from now on, so that a rule's
// increase sees the first event.
func (m *Metrics) Lease(name string) *Lease {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	if l, ok := m.leases[name]; ok {
		return l
	}
	l := &Lease{m: m, name: name}
	m.leases[name] = l
	return l
}

// Forget removes a lease that is no longer managed: its series do not
// outlive it. A meter still held counts on, into nothing served.
func (m *Metrics) Forget(name string) {
	m.lmu.Lock()
	defer m.lmu.Unlock()
	delete(m.leases, name)
}

// answeredBy counts a change of the server that answers.
func (m *Metrics) answeredBy(server string) {
	if server == "" {
		return
	}
	m.smu.Lock()
	changed := m.server != "" && m.server != server
	m.server = server
	m.smu.Unlock()
	if changed {
		m.serverChanges.Inc()
	}
}

// redisDurable is src's answer, read again once it is DurableEvery old.
func (m *Metrics) redisDurable(ctx context.Context) bool {
	m.dmu.Lock()
	defer m.dmu.Unlock()
	if now := m.opt.Now(); m.durableAt.IsZero() || now.Sub(m.durableAt) >= m.opt.DurableEvery {
		m.durable, m.durableAt = m.src.RedisDurable(ctx), now
	}
	return m.durable
}

// Lease counts what one lease's supervisor does: a supervisor.Meter.
type Lease struct {
	m    *Metrics
	name string

	acquired, lost, handedOff atomic.Uint64
}

// Answered implements supervisor.Meter.
func (l *Lease) Answered(a policy.ActionKind, ev policy.Event, took time.Duration) {
	switch {
	case a == policy.Renew && ev.Kind == policy.RenewFailed:
		l.m.renewFailures.Inc()
	case a == policy.Renew:
		l.m.renewSeconds.Observe(took.Seconds())
	case a == policy.Acquire && ev.Kind != policy.AcquireUnknown:
		l.m.acquireSeconds.Observe(took.Seconds())
	}
	// Only a record that came back carries the server that sent it.
	if ev.Kind == policy.Observed || ev.Kind == policy.RenewOK || ev.Kind == policy.AcquireOK || ev.Kind == policy.ReleaseOK {
		l.m.answeredBy(ev.Record.Server)
	}
}

// Journaled implements supervisor.Meter.
func (l *Lease) Journaled(j policy.Journal, c policy.Cause) {
	switch j {
	case policy.JournalAcquired:
		l.acquired.Add(1)
	case policy.JournalReleased:
		if c == policy.CauseHandoff {
			l.handedOff.Add(1)
		}
	case policy.JournalStopFailed:
		l.m.stopFailures.Inc()
	case policy.JournalKilled:
		l.m.kills.Inc()
	case policy.JournalUnitFailed:
		l.m.unitFailures.Inc()
	case policy.JournalRenewFailed, policy.JournalLost:
		l.lost.Add(1)
	}
}

// Garbage implements supervisor.Meter.
func (l *Lease) Garbage() { l.m.garbage.Inc() }
