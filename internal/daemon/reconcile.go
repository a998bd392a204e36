package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/unitctl"
)

// Reload discovers the annotated units and brings the supervisors in line:
// a new lease gets a supervisor, a removed one is handed off, released and
// unmanaged. Bad annotations and refused units are logged as config_error
// and left unmanaged; the rest keep working.
func (d *Daemon) Reload(ctx context.Context) {
	d.setPhase("discovering the annotated units")
	found, problems, unitProblems, complete := d.discover(ctx)
	if !complete || ctx.Err() != nil {
		// Units could not be listed (or the daemon is stopping): an empty
		// answer is not "nothing is annotated". Keep what runs.
		d.problem(fmt.Sprintf("discovery incomplete, nothing changed: %v", problems))
		return
	}
	d.mu.Lock()
	d.problems = problems
	d.unitProblems = unitProblems
	current := map[string][]string{}
	for lease, r := range d.sups {
		current[lease] = r.sup.Units
	}
	d.mu.Unlock()
	remove, add := reconcile(current, found)
	managed := map[string]bool{} // units managed after this reload, under any lease
	for _, units := range found {
		for _, u := range units {
			managed[u] = true
		}
	}
	for _, lease := range remove {
		d.remove(ctx, lease, managed)
	}
	add = d.notRemoving(add, found)
	d.validated.Store(0)
	d.toCheck.Store(int64(unitCount(found, add)))
	d.setPhase(fmt.Sprintf("validating the units of %d leases", len(add)))
	d.install(ctx, found, add)
	d.setPhase("checking the units of the other leases")
	changed := map[string]bool{}
	for _, lease := range append(remove, add...) {
		changed[lease] = true
	}
	d.reverify(ctx, found, changed)
	d.toCheck.Store(0)
	d.setPhase("watching the units and announcing this node's leases")
	d.rewatch(ctx)
	d.announce(ctx)
	d.steerSoon()
	d.notify("STATUS=" + d.summary())
}

// setPhase says what the discovery in progress does (startProgress); the
// first discovery's phases are kept, each with when it began, for the log
// line of the start.
func (d *Daemon) setPhase(p string) {
	d.phase.Store(&p)
	if d.starting.Load() {
		d.phases = append(d.phases, phaseAt{p, time.Now()})
	}
}

// phaseAt is a phase of the first discovery and when it began.
type phaseAt struct {
	what string
	at   time.Time
}

// startProgress is how far the discovery in progress has got.
func (d *Daemon) startProgress() string {
	p := d.phase.Load()
	if p == nil {
		return "reading the configuration"
	}
	if n := d.toCheck.Load(); n > 0 {
		return fmt.Sprintf("%s (%d of %d units validated)", *p, d.validated.Load(), n)
	}
	return *p
}

// unitCount is the number of units of leases.
func unitCount(groups map[string][]string, leases []string) int {
	n := 0
	for _, l := range leases {
		n += len(groups[l])
	}
	return n
}

// notRemoving drops from add the leases that wait: a lease, or a unit of
// it, still being removed (a failed stop holds the old lease). The reload
// that the end of the removal asks for adds them.
func (d *Daemon) notRemoving(add []string, found map[string][]string) []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	leases, units := map[string]bool{}, map[string]bool{}
	for lease, r := range d.sups {
		if r.removing {
			leases[lease] = true
			for _, u := range r.sup.Units {
				units[u] = true
			}
		}
	}
	return slices.DeleteFunc(add, func(lease string) bool {
		return leases[lease] || slices.ContainsFunc(found[lease], func(u string) bool { return units[u] })
	})
}

// reconcile compares the leases that run (current) with the ones
// discovery found, each with its units in order: remove are the leases
// that run but were not found or whose units changed, add the ones found
// that do not run as found. A lease whose units changed is in both: it is
// removed (handed off, released) and added anew. Both come sorted.
func reconcile(current, found map[string][]string) (remove, add []string) {
	for lease, units := range current {
		if want, ok := found[lease]; !ok || !slices.Equal(want, units) {
			remove = append(remove, lease)
		}
	}
	for lease, units := range found {
		if cur, ok := current[lease]; !ok || !slices.Equal(cur, units) {
			add = append(add, lease)
		}
	}
	slices.Sort(remove)
	slices.Sort(add)
	return remove, add
}

// discover returns the units to manage, grouped by lease, and logs every
// problem. complete is false when systemd could not list units at all.
func (d *Daemon) discover(ctx context.Context) (groups map[string][]string, problems []string, units []control.UnitProblem, complete bool) {
	anns, errs := d.sd.Discover(ctx)
	complete = len(anns) > 0 || len(errs) == 0
	for _, err := range errs {
		var ae *unitctl.AnnotationError
		if errors.As(err, &ae) {
			complete = true
			units = append(units, control.UnitProblem{Unit: ae.Unit, Kind: "annotation", Msg: err.Error()})
		}
		problems = append(problems, d.configError(err, ""))
	}
	groups = map[string][]string{}
	settings := map[string]leaseSettings{}
	first := map[string]unitctl.Annotation{}
	slices.SortFunc(anns, func(a, b unitctl.Annotation) int { return strings.Compare(a.Unit, b.Unit) })
	for _, a := range anns {
		ls := settingsOf(a)
		if f, ok := first[a.Lease]; ok && !ls.equal(settings[a.Lease]) {
			err := fmt.Errorf("%s:%d: [X-UnitLease] of %s: its Prefer=, Failback=, FailbackSettle=, FailureThreshold= or FailureWindow= differ from %s's, which lease %s follows: every unit of a lease must agree (%s)",
				a.File, a.Line, a.Unit, f.Unit, a.Lease, ls.diff(settings[a.Lease]))
			units = append(units, control.UnitProblem{Unit: a.Unit, Lease: a.Lease, Kind: "annotation", Msg: err.Error()})
			problems = append(problems, d.configError(err, a.Unit))
			continue
		}
		if _, ok := first[a.Lease]; !ok {
			first[a.Lease], settings[a.Lease] = a, ls
		}
		groups[a.Lease] = append(groups[a.Lease], a.Unit)
	}
	kept := make(map[string]*leaseSettings, len(settings))
	for lease, ls := range settings {
		if ls.equal(defaultSettings) {
			kept[lease] = &defaultSettings
		} else {
			kept[lease] = &ls
		}
	}
	d.mu.Lock()
	d.settings = kept
	d.mu.Unlock()
	for lease, units := range groups {
		slices.Sort(units)
		groups[lease] = units
	}
	return groups, problems, units, complete
}

func (d *Daemon) configError(err error, unit string) string {
	var ae *unitctl.AnnotationError
	if errors.As(err, &ae) {
		unit = ae.Unit
	}
	d.log.Error(err.Error(), logging.Event, "config_error", logging.Unit, unit)
	return err.Error()
}

// check is one unit's validation.
type check struct {
	lease, unit string
	plan        *unitctl.Plan
	err         error
}

// validate validates the units of leases, unitctl.ReadsInFlight at a
// time, and returns the results in the leases' and units' order.
func (d *Daemon) validate(ctx context.Context, groups map[string][]string, leases []string) []check {
	var checks []check
	for _, lease := range leases {
		for _, u := range groups[lease] {
			checks = append(checks, check{lease: lease, unit: u})
		}
	}
	links, err := d.sd.ScanLinks(ctx)
	if err != nil {
		d.log.Warn(err.Error() + "; asking systemd for each unit's UnitFileState instead")
		links = nil
	}
	unitctl.Each(len(checks), unitctl.ReadsInFlight, func(i int) {
		checks[i].plan, checks[i].err = d.sd.Validate(ctx, checks[i].unit, d.ucfg, links)
		d.validated.Add(1)
	})
	return checks
}

// install validates the units of the added leases, starts a supervisor
// for every lease whose units all passed, ineligible, writes their
// drop-ins in one batch with one daemon-reload, and makes each lease
// eligible as soon as its drop-ins are checked in effect. Meanwhile the supervisors stop
// the units (rule 6) and observe the records, so the lease span a cold
// cluster waits out ages while systemd reloads: an ineligible supervisor
// acquires nothing, so no unit starts before its guard is in place. A
// lease whose drop-in could not be written is removed again, never
// started here (its units stopped if its first step got that far, else
// left as they were, as a refused unit's are).
func (d *Daemon) install(ctx context.Context, groups map[string][]string, added []string) {
	var plans []*unitctl.Plan
	refused := map[string]bool{}
	checks := d.validate(ctx, groups, added)
	for _, c := range checks {
		if c.err != nil {
			d.problem(d.configError(c.err, c.unit))
			d.unitProblem(c.unit, c.lease, c.err)
			refused[c.lease] = true
			continue
		}
		for _, w := range c.plan.Warnings {
			d.log.Warn(c.unit+": "+w, logging.Event, "unit_warning", logging.Unit, c.unit)
		}
		plans = append(plans, c.plan)
	}
	if len(plans) == 0 {
		return // no reload: Install of nothing would still reload, and wake this again
	}
	d.setPhase(fmt.Sprintf("starting the supervisors of %d leases", len(added)-len(refused)))
	var started []string
	remaining := map[string]*atomic.Int32{} // per lease: its units not yet checked in effect
	for _, lease := range added {
		if !refused[lease] {
			d.add(ctx, lease, groups[lease], true)
			started = append(started, lease)
		}
	}
	// Each lease is eligible as soon as the last of its units is checked
	// in effect, while the others are still being checked: its
	// acquisition and start need not wait for a thousand other units'.
	for _, c := range checks {
		if c.err != nil || refused[c.lease] {
			continue
		}
		d.mu.Lock()
		r := d.sups[c.lease]
		d.mu.Unlock()
		if r == nil {
			continue
		}
		left := remaining[c.lease]
		if left == nil {
			left = &atomic.Int32{}
			left.Store(int32(len(groups[c.lease])))
			remaining[c.lease] = left
		}
		sup := r.sup
		c.plan.InEffect = func() {
			if left.Add(-1) == 0 {
				sup.SetEligibleSoon(true)
			}
		}
	}
	d.setPhase(fmt.Sprintf("writing the drop-ins of %d units, reloading systemd", len(plans)))
	failed, err := d.sd.Install(ctx, plans)
	for _, c := range checks {
		if c.plan != nil {
			c.plan.InEffect = nil // Install's only
		}
	}
	if err != nil {
		d.problem(d.configError(err, ""))
		for _, lease := range started {
			refused[lease] = true
		}
	}
	for u, err := range failed {
		d.problem(d.configError(err, u))
		for lease, units := range groups {
			if slices.Contains(units, u) {
				refused[lease] = true
				d.unitProblem(u, lease, err)
			}
		}
	}
	keep := map[string]bool{} // drop-ins stay as Install left them
	for _, units := range groups {
		for _, u := range units {
			keep[u] = true
		}
	}
	d.setPhase(fmt.Sprintf("making %d leases eligible", len(started)))
	for _, lease := range started {
		d.mu.Lock()
		r := d.sups[lease]
		d.mu.Unlock()
		switch {
		case r == nil:
		case refused[lease]:
			d.remove(ctx, lease, keep)
		default:
			r.sup.SetEligibleSoon(true)
		}
	}
}

// reverify checks the units of every lease this reload kept (not in
// changed: those were just installed, or removed) again, after every
// systemd reload: each is validated, its drop-in written again if it is
// gone (systemctl revert removes it) and checked to be in effect, with no
// reload for the check alone (unitctl's Recheck). A lease with a unit
// that is refused, or whose drop-in is defeated, is ineligible on this
// node, with a config_error (one that could not be read changes nothing):
// a holder hands it off (stop, confirm inactive, release), and the node
// acquires it no more until a later reload finds every unit sound. Its
// drop-in, and the guard in it, stay where they still apply.
func (d *Daemon) reverify(ctx context.Context, found map[string][]string, changed map[string]bool) {
	var plans []*unitctl.Plan
	bad := map[string]bool{}     // refused, or the drop-in is defeated
	unknown := map[string]bool{} // could not be read: left as it is
	leaseOf := map[string]string{}
	var kept []string
	for lease := range found {
		if !changed[lease] {
			kept = append(kept, lease)
		}
	}
	slices.Sort(kept)
	for _, c := range d.validate(ctx, found, kept) {
		leaseOf[c.unit] = c.lease
		switch {
		case errors.Is(c.err, unitctl.ErrRefused):
			d.problem(d.configError(c.err, c.unit))
			d.unitProblem(c.unit, c.lease, c.err)
			bad[c.lease] = true
		case c.err != nil:
			d.problem(d.configError(c.err, c.unit))
			unknown[c.lease] = true
		default:
			plans = append(plans, c.plan) // its warnings were logged when it was added
		}
	}
	if len(plans) > 0 {
		failed, err := d.sd.Recheck(ctx, plans)
		if err != nil {
			d.problem(d.configError(err, ""))
			for _, p := range plans {
				unknown[leaseOf[p.Unit]] = true
			}
		}
		for u, err := range failed {
			d.problem(d.configError(err, u))
			if errors.Is(err, unitctl.ErrDropIn) {
				d.unitProblem(u, leaseOf[u], err)
				bad[leaseOf[u]] = true
			} else {
				unknown[leaseOf[u]] = true
			}
		}
	}
	for lease := range found {
		if changed[lease] || unknown[lease] && !bad[lease] {
			continue
		}
		d.mu.Lock()
		r := d.sups[lease]
		d.mu.Unlock()
		if r != nil && !r.removing {
			r.sup.SetEligible(ctx, !bad[lease])
		}
	}
}

// ended reports whether s took its last step.
func ended(s *supervisor.Supervisor) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// unitProblem records a unit refused, or whose drop-in is defeated, for
// status.
func (d *Daemon) unitProblem(unit, lease string, err error) {
	kind := "error"
	switch {
	case errors.Is(err, unitctl.ErrRefused):
		kind = "refused"
	case errors.Is(err, unitctl.ErrDropIn):
		kind = "drop-in"
	}
	d.mu.Lock()
	d.unitProblems = append(d.unitProblems, control.UnitProblem{Unit: unit, Lease: lease, Kind: kind, Msg: err.Error()})
	d.mu.Unlock()
}

func (d *Daemon) problem(p string) {
	d.mu.Lock()
	d.problems = append(d.problems, p)
	d.mu.Unlock()
}

// RenewGrid is the renew grid as a fraction of retry: the leases of one
// daemon renew at ten instants per retry period, so their renewals share
// pipelines (redislease batches what is ready at once). Only a lease's
// first renewal comes early, by less than a tenth of retry.
const RenewGrid = 10

// add starts a supervisor; its first step stops the units (rule 6). An
// ineligible one acquires nothing until SetEligible(true).
func (d *Daemon) add(ctx context.Context, lease string, units []string, ineligible bool) {
	_, identified := d.store.(interface{ Identifies() })
	m, err := policy.New(policy.Config{Timing: d.cfg.Timing, Seed: rand.Uint64(), RenewGrid: d.cfg.Timing.Retry / RenewGrid,
		Identified: identified, Node: d.cfg.Node, Withdrawn: d.withdrawn(lease), Ineligible: ineligible})
	if err != nil {
		d.log.Error(err.Error(), logging.Event, "config_error", logging.Lease, lease)
		return
	}
	d.mu.Lock()
	if d.units == nil {
		d.units = &unitsOf{d.sd, d.cfg.Timing.StopWait, d.ucfg}
	}
	us := d.units
	d.mu.Unlock()
	sup := supervisor.New(lease, units, d.cfg.Node, m, d.store, us, d.clock, d.supLog)
	sup.SetHooks(&leaseHooks{d: d, lease: lease})
	if d.metrics != nil {
		sup.SetMeter(d.metrics.Lease(lease))
	}
	sctx := context.WithoutCancel(ctx)
	end := sup.Launch(sctx)
	d.mu.Lock()
	d.sups[lease] = &running{sup: sup, cancel: end}
	for _, u := range units {
		d.byUnit[u] = sup
	}
	d.mu.Unlock()
	// A drain (or an exclusion) that read the supervisors before this one
	// was among them, but after the machine's withdrawal was read above,
	// is told here: every change sets its state before it reads them.
	d.wmu.Lock()
	sup.SetWithdrawn(sctx, d.withdrawn(lease))
	d.wmu.Unlock()
}

// remove hands a lease off if this node holds it, waits until it no
// longer does, then ends its supervisor and removes the drop-ins of the
// units not in keep (a unit managed under another lease from now on keeps
// its drop-in, and its guard).
//
// A stop that failed keeps the lease held: its supervisor goes on
// renewing and trying the stop again, its drop-in (and guard) stays, and
// status shows it stop_failed. Once the units are confirmed inactive and
// the lease released, the removal ends, and the loop reloads in case the
// lease was annotated again meanwhile. A failed stop never lets the lease
// lapse to a peer while the units may still run.
func (d *Daemon) remove(ctx context.Context, lease string, keep map[string]bool) {
	d.mu.Lock()
	r := d.sups[lease]
	if r == nil || r.removing {
		d.mu.Unlock()
		return
	}
	r.removing = true
	d.mu.Unlock()
	d.relinquishForGood(ctx, r.sup, true)
	if !settled(r.sup) {
		// Held (its stop failed), or a stop not under a lease still
		// under way or failed (the startup's, or one after a loss):
		// ended now, the units would be left as they are, running,
		// their drop-in and guard gone.
		if held := r.sup.Holding(); held || stopFailed(r.sup) {
			msg := "lease " + lease + " stays held here until it stops"
			if !held {
				msg = "its stop is tried again until it is"
			}
			d.log.Error(fmt.Sprintf("%s: no longer annotated, but not confirmed inactive: %s", strings.Join(r.sup.Units, ", "), msg),
				append(logging.UnitFields(r.sup.Units), logging.Event, "stop_failed", logging.Lease, lease)...)
		}
		go func() {
			// Not on the reload's ctx: a SIGTERM must not end a
			// supervisor whose units may still run.
			ctx := context.WithoutCancel(ctx)
			d.waitFor(ctx, func() bool { return settled(r.sup) || ended(r.sup) })
			if !settled(r.sup) {
				return // Shutdown ended it: the drop-in and its guard stay
			}
			d.end(ctx, lease, r, keep)
			select {
			case d.again <- struct{}{}:
			default:
			}
		}()
		return
	}
	d.end(ctx, lease, r, keep)
}

// end ends a lease's supervisor, which holds nothing, and unmanages its
// units.
func (d *Daemon) end(ctx context.Context, lease string, r *running, keep map[string]bool) {
	r.cancel()
	<-r.sup.Done()
	d.mu.Lock()
	delete(d.sups, lease)
	for _, u := range r.sup.Units {
		if d.byUnit[u] == r.sup {
			delete(d.byUnit, u)
		}
	}
	if d.metrics != nil {
		d.metrics.Forget(lease)
	}
	if r.sup.StopPending() {
		d.ended = append(d.ended, r.sup)
	}
	d.mu.Unlock()
	var gone []string
	for _, u := range r.sup.Units {
		if !keep[u] {
			gone = append(gone, u)
		}
	}
	if len(gone) > 0 {
		if err := d.sd.Uninstall(ctx, d.ucfg, gone); err != nil {
			d.log.Warn("removing drop-ins: "+err.Error(), logging.Lease, lease)
		}
	}
	d.log.Info(fmt.Sprintf("%s: no longer managed (lease %s)", strings.Join(r.sup.Units, ", "), lease),
		append(logging.UnitFields(r.sup.Units), logging.Event, "unmanaged", logging.Lease, lease)...)
}

// relinquish stops the units and releases the lease if this node holds
// it, and returns once it does not (or the stop failed for good).
// unmanaged says why: the lease is no longer managed here (its
// annotation was removed or refused), not a handoff.
func (d *Daemon) relinquish(ctx context.Context, s *supervisor.Supervisor, unmanaged bool) {
	if !s.Holding() {
		return
	}
	if unmanaged {
		s.Unmanage(ctx)
	} else {
		s.Handoff(ctx)
	}
	d.waitFor(ctx, func() bool { return !s.Holding() || stopFailed(s) })
}

// relinquishForGood is relinquish for a supervisor about to end: it also
// makes it ineligible and waits, on no ctx (an acquisition is bounded by
// reply_max), until the supervisor is settled, or its stop failed, or it
// stops units it does not hold (the caller decides whether to wait for
// that). An acquisition sent before may land after relinquish saw the
// lease not held; the ineligible machine gives it back at once (never
// started: released; starting: stopped, confirmed inactive, released)
// rather than the ended supervisor leaving the record held, unrenewed,
// until its TTL.
func (d *Daemon) relinquishForGood(ctx context.Context, s *supervisor.Supervisor, unmanaged bool) {
	d.relinquish(ctx, s, unmanaged)
	ctx = context.WithoutCancel(ctx)
	s.SetEligible(ctx, false)
	d.waitFor(ctx, func() bool {
		st := s.Status()
		return settled(s) || stopFailed(s) || (!st.Holding && st.Role == policy.Stopping.String())
	})
}

// settled: the supervisor holds nothing and has nothing under way that
// could leave a unit running or a record held: it observes, as a standby
// or backing off.
func settled(s *supervisor.Supervisor) bool {
	st := s.Status()
	return !st.Holding && (st.Role == policy.Standby.String() || st.Role == policy.Backoff.String())
}

// stopFailed: the supervisor's last stop failed; it tries again every
// stop_wait.
func stopFailed(s *supervisor.Supervisor) bool { return s.Status().Role == policy.StopFailed.String() }

// waitFor polls cond until it holds or ctx ends. The supervisors publish
// their state after every step; every 10 ms is cheap for the few seconds
// of a handoff or a removal, and adds little to it (a re-annotated unit's
// new lease begins only once the old one is released).
func (d *Daemon) waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Shutdown stops every unit this node runs, waits for inactive, releases
// and returns: what SIGTERM does. A lease whose stop failed stays held,
// renewed while the stop is tried again, until its units stop or ctx
// ends (systemd kills a daemon that does not stop within its
// TimeoutStopSec=): a failed stop never lets the lease lapse while this
// daemon lives.
//
// It tells systemd STOPPING=1 only at the end: until then the watchdog
// stays armed, so that a daemon that hangs while handing off, its units
// still running, is killed and its units stopped through BindsTo=.
func (d *Daemon) Shutdown(ctx context.Context) {
	defer d.notify("STOPPING=1")
	var wg sync.WaitGroup
	for _, r := range d.running() {
		d.intend(r.sup.Lease, "stop")
		wg.Go(func() {
			d.relinquishForGood(ctx, r.sup, false)
			if r.sup.Holding() {
				d.log.Error(fmt.Sprintf("%s: not confirmed inactive: lease %s stays held, and the daemon does not exit, until it stops",
					strings.Join(r.sup.Units, ", "), r.sup.Lease), append(logging.UnitFields(r.sup.Units), logging.Event, "stop_failed", logging.Lease, r.sup.Lease)...)
				d.waitFor(ctx, func() bool { return !r.sup.Holding() || ended(r.sup) })
			}
		})
	}
	wg.Wait()
	for _, r := range d.running() {
		r.cancel()
		<-r.sup.Done()
	}
}

// leaseHooks tells the daemon of one lease's events: one small value a
// lease, where a closure for each of the three was three.
type leaseHooks struct {
	d     *Daemon
	lease string
}

func (h *leaseHooks) UnitFailed() { h.d.unitFailed(h.lease) }
func (h *leaseHooks) Acquired(seen, got policy.Record) {
	h.d.acquired(h.lease, seen, got)
}
func (h *leaseHooks) Released(rec policy.Record, c policy.Cause) {
	h.d.released(h.lease, rec, c)
}
