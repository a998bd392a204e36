package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/unitctl"
)

// leaseSettings are what a lease's annotation says beyond its name: the
// same for every unit of the lease (discover refuses a unit that
// disagrees).
type leaseSettings struct {
	Prefer    []string      // nodes in order of preference
	Failback  bool          // hand the lease to a more preferred node once it is ready for Settle
	Settle    time.Duration // FailbackSettle=
	Threshold int           // FailureThreshold=: 0 never excludes
	Window    time.Duration // FailureWindow=
}

// defaultSettings are the settings of a lease whose units set none of
// the keys; shared, never changed.
var defaultSettings = func() leaseSettings {
	var a unitctl.Annotation
	a.SetDefaults()
	return settingsOf(a)
}()

func settingsOf(a unitctl.Annotation) leaseSettings {
	return leaseSettings{Prefer: a.Prefer, Failback: a.Failback, Settle: a.FailbackSettle,
		Threshold: a.FailureThreshold, Window: a.FailureWindow}
}

func (s leaseSettings) equal(o leaseSettings) bool { return s.diff(o) == "" }

// diff names the keys where s and o differ, with both values.
func (s leaseSettings) diff(o leaseSettings) string {
	var d []string
	if !slices.Equal(s.Prefer, o.Prefer) {
		d = append(d, fmt.Sprintf("Prefer=%s, not %s", strings.Join(s.Prefer, " "), strings.Join(o.Prefer, " ")))
	}
	if s.Failback != o.Failback {
		d = append(d, fmt.Sprintf("Failback=%t, not %t", s.Failback, o.Failback))
	}
	if s.Settle != o.Settle {
		d = append(d, fmt.Sprintf("FailbackSettle=%v, not %v", s.Settle, o.Settle))
	}
	if s.Threshold != o.Threshold {
		d = append(d, fmt.Sprintf("FailureThreshold=%d, not %d", s.Threshold, o.Threshold))
	}
	if s.Window != o.Window {
		d = append(d, fmt.Sprintf("FailureWindow=%v, not %v", s.Window, o.Window))
	}
	return strings.Join(d, "; ")
}

// settingsFor is lease's settings as the last discovery found them.
func (d *Daemon) settingsFor(lease string) leaseSettings {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ls := d.settings[lease]; ls != nil {
		return *ls
	}
	return leaseSettings{}
}

// rank is node's place in prefer: 0 for the most preferred, len(prefer)
// for a node not listed.
func rank(prefer []string, node string) int {
	if i := slices.Index(prefer, node); i >= 0 {
		return i
	}
	return len(prefer)
}

// DeferStep is how much longer a standby waits than the next more
// preferred ready node, per place between them in Prefer=: that node
// may have begun to age the record up to a poll later than this one,
// and sees the end of its own wait up to a poll and two round trips
// (its observation and its acquisition) later. The delay is bounded: a
// more preferred node that announces itself ready but does not take the
// lease (it died without closing its connection, it backs off) holds
// the lease up by at most len(Prefer=) steps.
func (d *Daemon) DeferStep() time.Duration {
	t := d.cfg.Timing
	return 2*t.PollMax + 4*t.ReplyMax
}

// steerState is what steer remembers between its rounds: since when
// the node a holder would fail back to has been ready, and the leases
// failing back now.
type steerState struct {
	readySince map[string]readySince // by lease
	failingTo  map[string]bool       // by lease: a failback is under way
}

type readySince struct {
	node  string
	since time.Time
}

// steer applies every lease's preference once: a standby defers to the
// more preferred nodes that announce themselves ready (SetDelay), and a
// holder with Failback= hands the lease to the most preferred ready node
// above it once that node has been ready for FailbackSettle=. It asks
// Redis once for all leases, only about nodes more preferred than this
// one. Announcements steer, never decide: every move is still a handoff
// (stop, confirm inactive, release) and an acquisition.
func (d *Daemon) steer(ctx context.Context) {
	ask := map[string][]string{}
	sups := map[string]*supervisor.Supervisor{}
	for _, r := range d.running() {
		if r.removing {
			continue
		}
		st := d.settingsFor(r.sup.Lease)
		if len(st.Prefer) == 0 {
			r.sup.SetDelay(ctx, 0)
			delete(d.steering.readySince, r.sup.Lease)
			continue
		}
		if above := st.Prefer[:min(rank(st.Prefer, d.cfg.Node), len(st.Prefer))]; len(above) > 0 {
			ask[r.sup.Lease], sups[r.sup.Lease] = above, r.sup
		} else {
			r.sup.SetDelay(ctx, 0) // the most preferred node defers to none
		}
	}
	if len(ask) == 0 {
		return
	}
	ready, err := d.store.ReadyAmong(ctx, ask)
	if err != nil {
		// Without the answer, defer to nobody new: keep the delays as
		// they are, and fail back nowhere.
		d.log.Debug("reading which preferred nodes are ready: " + err.Error())
		clear(d.steering.readySince) // a settle time counts only what was seen
		return
	}
	for lease, s := range sups {
		st := d.settingsFor(lease)
		best := ""
		if rs := ready[lease]; len(rs) > 0 {
			best = slices.MinFunc(rs, func(a, b string) int { return rank(st.Prefer, a) - rank(st.Prefer, b) })
		}
		delay := time.Duration(0)
		if best != "" {
			delay = time.Duration(rank(st.Prefer, d.cfg.Node)-rank(st.Prefer, best)) * d.DeferStep()
		}
		s.SetDelay(ctx, delay)
		d.failback(ctx, s, st, best)
	}
}

// failback hands s's lease to best, the most preferred ready node above
// this one, once best has been ready for the settle time and this node
// leads with its units started. Only with Failback=; never while the
// node is drained (the drain moves the leases itself).
func (d *Daemon) failback(ctx context.Context, s *supervisor.Supervisor, st leaseSettings, best string) {
	ss := &d.steering
	if ss.readySince == nil {
		ss.readySince, ss.failingTo = map[string]readySince{}, map[string]bool{}
	}
	// The settle time counts while this node leads and best is ready: a
	// node that just took the lease over does not hand it back at once
	// because best was ready while it waited.
	if best == "" || !st.Failback || s.Status().Role != policy.Leader.String() {
		delete(ss.readySince, s.Lease)
		return
	}
	now := time.Now()
	if rs, ok := ss.readySince[s.Lease]; !ok || rs.node != best {
		ss.readySince[s.Lease] = readySince{node: best, since: now}
	}
	if d.drained.Load() || ss.failingTo[s.Lease] || now.Sub(ss.readySince[s.Lease].since) < st.Settle {
		return
	}
	ss.failingTo[s.Lease] = true
	d.log.Info(fmt.Sprintf("%s: failing back: %s, more preferred than this node, has been ready for %v: handing lease %s to it",
		strings.Join(s.Units, ", "), best, st.Settle, s.Lease),
		append(logging.UnitFields(s.Units), logging.Event, "failback", logging.Lease, s.Lease, logging.Holder, best)...)
	d.intend(s.Lease, "failback")
	go func() {
		_, err := d.handOver(ctx, s, best)
		if err != nil {
			d.log.Warn(fmt.Sprintf("failing back lease %s to %s: %v", s.Lease, best, err),
				logging.Event, "failback", logging.Lease, s.Lease)
		}
		select {
		case d.steerDone <- s.Lease:
		case <-ctx.Done():
		}
	}()
}

// steerSoon asks steerLoop for a round now.
func (d *Daemon) steerSoon() {
	select {
	case d.steerNow <- struct{}{}:
	default:
	}
}

// steerLoop runs a round every poll_max, and at once after each reload
// and each failure: the failure counts' exclusions, then the
// preferences, until ctx ends.
func (d *Daemon) steerLoop(ctx context.Context) {
	tick := time.NewTicker(d.cfg.Timing.PollMax)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case lease := <-d.steerDone:
			delete(d.steering.failingTo, lease)
			delete(d.steering.readySince, lease)
		case <-d.steerNow:
		case <-tick.C:
		}
		d.round(ctx, d.markersDue.Swap(false) || n%MarkerRounds == 0)
		d.steer(ctx)
	}
}
