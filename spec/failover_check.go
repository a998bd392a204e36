package spec

import (
	"errors"
	"fmt"
	"runtime"
)

// FailoverStep is one step of a behaviour of LeaseFailover.tla.
type FailoverStep = StepOf[FailoverState]

// FailoverResult is the outcome of checking one instance of
// LeaseFailover.tla; its fields mean what Result's do.
type FailoverResult struct {
	Failover
	States           int            `json:"states"`
	TypeOK           bool           `json:"type_ok"`
	ProcessExclusion bool           `json:"process_exclusion"`
	Handoff          bool           `json:"handoff"`
	Violated         string         `json:"violated,omitempty"`
	Kind             string         `json:"counterexample_kind,omitempty"`
	CycleFrom        *int           `json:"cycle_from,omitempty"`
	Counterexample   []FailoverStep `json:"counterexample"`
}

// OK reports whether every property holds.
func (r FailoverResult) OK() bool { return r.TypeOK && r.ProcessExclusion && r.Handoff }

// Check explores every reachable state of f and checks TypeOK,
// ProcessExclusion and Handoff, as Lease.Check does.
func (f Failover) Check() (FailoverResult, error) {
	if err := f.Validate(); err != nil {
		return FailoverResult{}, err
	}
	v, err := decide(f.module())
	if err != nil {
		return FailoverResult{}, err
	}
	return FailoverResult{
		Failover: f, States: v.states, TypeOK: v.typeOK, ProcessExclusion: v.exclusion, Handoff: v.handoff,
		Violated: v.violated, Kind: v.kind, CycleFrom: v.cycleFrom, Counterexample: v.counterexample,
	}, nil
}

// Excludes reports whether ProcessExclusion holds, stopping at the first
// violating state.
func (f Failover) Excludes() (bool, error) {
	steps, err := f.Find(func(s FailoverState) bool { return !FailoverExclusion(s) })
	return steps == nil, err
}

// Find returns a shortest behaviour of f to a state for which stop
// reports true, or nil when no reachable state does.
func (f Failover) Find(stop func(FailoverState) bool) ([]FailoverStep, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return firstWhere(f.module(), stop)
}

// Replay checks that steps is a behaviour of f, as Lease.Replay does.
func (f Failover) Replay(steps []FailoverStep, cycleFrom int) error {
	return replaySteps(f.module(), steps, cycleFrom)
}

// Enabled lists the actions that have a successor in s.
func (f Failover) Enabled(s FailoverState) []string { return enabled(f.module(), s) }

// module describes f to the search. A state is its own key.
func (f Failover) module() *module[FailoverState, FailoverState] {
	m := &module[FailoverState, FailoverState]{
		name:      fmt.Sprintf("%+v", f),
		init:      f.Init(),
		key:       func(s FailoverState) FailoverState { return s },
		typeOK:    f.TypeOK,
		exclusion: FailoverExclusion,
		done:      FailoverDone,
	}
	for _, a := range FailoverActions {
		m.actions = append(m.actions, a.Name)
		m.next = append(m.next, func(s FailoverState, emit func(FailoverState)) { a.Next(f, s, emit) })
	}
	return m
}

// FailoverSafe is the law the failover sweep finds, with every time in
// seconds: the store may fail over (a replica promoted with an earlier
// state, the old master taking the leader's writes for up to maxLag seconds
// after it was cut off, the standby's store back under a new identity
// detect seconds after the cut) and ProcessExclusion still holds under the
// server identity rule exactly when
//
//	leaseSpan >= retry + renew + stopWait + 1                     (Lease.tla, ReplyMax 0)
//	maxLag    <= detect + leaseSpan - (retry + renew + stopWait + 1)
//
// With the smallest safe lease span the second line reads maxLag <= detect:
// the old master must refuse writes no later than the failover completes.
//
// Why: the leader's last renewal can commit on the old master maxLag after
// the cut, and its unit may live retry + renew + stopWait after that. With
// the rule, the standby's age restarts when it first reads the new master,
// no earlier than detect after the cut, and it starts leaseSpan later. The
// first line is the base module's law (a store that never fails over); the
// failover module's own verdicts below it mean nothing (its cut always comes,
// and restarts the age). Without the rule no such bound holds: see the
// package's README.
func FailoverSafe(leaseSpan, retry, renew, stopWait, maxLag, detect int) bool {
	bound := retry + renew + stopWait + 1
	return leaseSpan >= bound && maxLag <= detect+leaseSpan-bound
}

// SafeMaxLag is the largest MaxLag for which ProcessExclusion holds with
// f's other constants, by the laws the sweep finds, or -1 when none does.
// With the rule it is FailoverSafe's: Detect + LeaseSpan - (Retry + Renew +
// StopWait + 1). Without it, the standby may take a released record that
// the new master brought back the moment it reads it, and ages a record it
// saw before the cut across the change; the only safe failovers are those
// that come after the old leader's unit is gone whatever it did:
// Detect >= MaxLag + Retry + Renew + StopWait + 1, however long the lease
// span.
func (f Failover) SafeMaxLag() int {
	bound := f.Retry + f.Renew + f.StopWait + 1
	switch {
	case f.LeaseSpan < bound:
		return -1
	case f.Rule:
		return max(-1, f.Detect+f.LeaseSpan-bound)
	default:
		return max(-1, f.Detect-bound)
	}
}

// FailoverSweepRow is the failover sweep's finding for one Detect.
type FailoverSweepRow struct {
	Detect int `json:"detect"`
	// MaxSafe is the largest MaxLag for which ProcessExclusion holds with
	// the rule, -1 when it fails already at MaxLag 0.
	MaxSafe int `json:"max_safe_max_lag"`
	// Law is the largest MaxLag FailoverSafe allows (f.SafeMaxLag()).
	Law int `json:"law"`
	// MaxSafeWithoutRule is MaxSafe without the rule.
	MaxSafeWithoutRule int `json:"max_safe_max_lag_without_rule"`
	// LawWithoutRule is the largest MaxLag for which Detect >= MaxLag +
	// Retry + Renew + StopWait + 1, the law without the rule, or -1.
	LawWithoutRule int `json:"law_without_rule"`
}

// OK reports whether the row agrees with both laws.
func (r FailoverSweepRow) OK() bool {
	return r.MaxSafe == r.Law && r.MaxSafeWithoutRule == r.LawWithoutRule
}

// FailoverSweep finds, for each Detect in detects, with base's other
// constants, the largest MaxLag for which ProcessExclusion holds, with the
// rule and without it. It assumes that a longer MaxLag is never safer
// (the old master takes every write a shorter one would): it brackets the
// bound by doubling MaxLag from 0 and then bisects, checking
// O(log(bound)) instances per row; the law tests check every MaxLag on a
// grid of small timings.
func FailoverSweep(base Failover, detects []int) ([]FailoverSweepRow, error) {
	type job struct {
		row  int
		rule bool
	}
	rows := make([]FailoverSweepRow, len(detects))
	errs := make([]error, 2*len(detects))
	work := make(chan job)
	done := make(chan struct{})
	for range runtime.GOMAXPROCS(0) {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := range work {
				f := base
				f.Detect, f.Rule = detects[j.row], j.rule
				bound, err := largestSafeMaxLag(f)
				if j.rule {
					rows[j.row].MaxSafe, errs[2*j.row] = bound, err
				} else {
					rows[j.row].MaxSafeWithoutRule, errs[2*j.row+1] = bound, err
				}
			}
		}()
	}
	// Largest first: they take longest.
	for i := len(detects) - 1; i >= 0; i-- {
		f := base
		f.Detect = detects[i]
		rows[i].Detect, rows[i].Law = f.Detect, f.SafeMaxLag()
		f.Rule = false
		rows[i].LawWithoutRule = f.SafeMaxLag()
		work <- job{i, true}
		work <- job{i, false}
	}
	close(work)
	for range runtime.GOMAXPROCS(0) {
		<-done
	}
	return rows, errors.Join(errs...)
}

// largestSafeMaxLag brackets and bisects the largest MaxLag for which f
// excludes, -1 if none does.
func largestSafeMaxLag(f Failover) (int, error) {
	excludes := func(maxLag int) (bool, error) {
		f.MaxLag = maxLag
		return f.Excludes()
	}
	ok, err := excludes(0)
	if err != nil || !ok {
		return -1, err
	}
	safe, unsafe := 0, 1
	for {
		ok, err := excludes(unsafe)
		if err != nil {
			return 0, err
		}
		if !ok {
			break
		}
		safe = unsafe
		if unsafe *= 2; unsafe > MaxConstant {
			return 0, fmt.Errorf("spec: exclusion holds for every MaxLag up to %d for %+v", MaxConstant, f)
		}
	}
	for unsafe-safe > 1 {
		mid := (safe + unsafe) / 2
		ok, err := excludes(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			safe = mid
		} else {
			unsafe = mid
		}
	}
	return safe, nil
}

// The two ways a store that fails over breaks ProcessExclusion without the
// rule, named by what the new master holds when the standby acquires.
const (
	// HazardReleased: a released record (one the leader acquired over, or
	// its own release), which the standby takes at once.
	HazardReleased = "released"
	// HazardHeld: a held record the standby saw before the cut, whose age
	// goes on across the change, while the leader's later renewals, which
	// the new master lacks, keep its unit running.
	HazardHeld = "held"
)

// Hazard returns a shortest behaviour of f that breaks ProcessExclusion
// once the new master holds a record of the given kind (HazardReleased,
// HazardHeld, or "" for either), or nil when there is none.
func (f Failover) Hazard(kind string) ([]FailoverStep, error) {
	var holds func(FailoverState) bool
	switch kind {
	case HazardReleased:
		holds = func(s FailoverState) bool { return s.Released(s.Frozen) }
	case HazardHeld:
		holds = func(s FailoverState) bool { return !s.Released(s.Frozen) }
	case "":
		holds = func(FailoverState) bool { return true }
	default:
		return nil, fmt.Errorf("spec: no hazard %q (want %q or %q)", kind, HazardReleased, HazardHeld)
	}
	return f.Find(func(s FailoverState) bool { return !FailoverExclusion(s) && s.Rolled && holds(s) })
}

// FailoverTimes returns the time of each step of a behaviour, in seconds
// from Init: the module's clock restarts at the cut and stops at Settle,
// so the time is the number of Ticks before the step.
func FailoverTimes(steps []FailoverStep) []int {
	times := make([]int, len(steps))
	now := 0
	for i, s := range steps {
		if s.Action == "Tick" {
			now++
		}
		times[i] = now
	}
	return times
}
