// Package policy is unitlease's decisions, without I/O: the timing and
// its derived safe lease span, the lease record as the decisions read it
// (Record), and one state machine per lease and node that is standby and
// leader in turn. It imports nothing of unitlease; the store and the
// supervisor speak its types.
//
// The daemon owns the clock, the store and systemd. It feeds the machine
// events (a Tick when the last Output's Wake comes, and the result of
// every action it was given) together with the node's monotonic Instant,
// and carries out the actions that come back:
//
//	m, err := policy.New(policy.Config{Timing: t, Seed: seed})
//	m, out := m.Step(now(), policy.Event{Kind: policy.Tick}) // first: stop the unit
//	for a := range out.Actions() { ... }                   // then arm a timer at out.Wake
//
// Every state, event, action and journal event has a lower-case name for
// log lines. README.md beside this file gives the timing assumptions, the
// transitions, the refinement test against spec/Lease.tla and the
// benchmark figures (one step: about 75 ns, no allocations).
package policy
