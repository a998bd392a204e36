package spec

import (
	"errors"
	"fmt"
)

// Lease is an instance of the TLA+ module Lease.tla: its constants.
//
// LeaseSpan and ReplyMax are the module's CONSTANTS. Retry, Renew, StopWait,
// PollLow and PollHigh are definitions in the module (5, 20, 10, 5, 11); here
// they are parameters so the timing policy can check other values. Seed
// returns the module exactly as written.
type Lease struct {
	LeaseSpan int `json:"lease_span"`
	ReplyMax  int `json:"reply_max"`
	Retry     int `json:"retry"`
	Renew     int `json:"renew"`
	StopWait  int `json:"stop_wait"`
	PollLow   int `json:"poll_low"`
	PollHigh  int `json:"poll_high"`
}

// The values the module defines for its non-CONSTANT timings.
const (
	SeedRetry    = 5
	SeedRenew    = 20
	SeedStopWait = 10
	SeedPollLow  = 5
	SeedPollHigh = 11
)

// Seed returns the module with the given constants and its own timings.
func Seed(leaseSpan, replyMax int) Lease {
	return Lease{
		LeaseSpan: leaseSpan,
		ReplyMax:  replyMax,
		Retry:     SeedRetry,
		Renew:     SeedRenew,
		StopWait:  SeedStopWait,
		PollLow:   SeedPollLow,
		PollHigh:  SeedPollHigh,
	}
}

// MaxConstant bounds every constant so that a state packs into 64 bits
// (see key) and the state space stays small enough to enumerate.
const MaxConstant = 1000

// ErrAssume reports constants outside the module's ASSUME or outside the
// ranges the checker supports.
var ErrAssume = errors.New("spec: constants violate ASSUME")

// Validate checks the module's ASSUME (LeaseSpan \in Nat \ {0},
// ReplyMax \in 0..20) and what the parameters need to be meaningful:
// non-negative timings and 1 <= PollLow <= PollHigh (a zero poll lets the
// standby observe forever without time passing).
func (l Lease) Validate() error {
	switch {
	case l.LeaseSpan < 1 || l.LeaseSpan > MaxConstant:
		return fmt.Errorf("%w: LeaseSpan %d is not in 1..%d", ErrAssume, l.LeaseSpan, MaxConstant)
	case l.ReplyMax < 0 || l.ReplyMax > 20:
		return fmt.Errorf("%w: ReplyMax %d is not in 0..20", ErrAssume, l.ReplyMax)
	}
	for _, c := range []struct {
		name     string
		v, least int
	}{
		{"Retry", l.Retry, 0},
		{"Renew", l.Renew, 0},
		{"StopWait", l.StopWait, 0},
		{"PollLow", l.PollLow, 1},
		{"PollHigh", l.PollHigh, l.PollLow},
	} {
		if c.v < c.least || c.v > MaxConstant {
			return fmt.Errorf("%w: %s %d is not in %d..%d", ErrAssume, c.name, c.v, c.least, MaxConstant)
		}
	}
	return nil
}

// Limit == LeaseSpan + 2 * PollHigh + ReplyMax + Retry + Renew + StopWait
func (l Lease) Limit() int {
	return l.LeaseSpan + 2*l.PollHigh + l.ReplyMax + l.Retry + l.Renew + l.StopWait
}

// LeaderPC is the leader's control state.
type LeaderPC uint8

// The leader's control states, as in the module.
const (
	Pending LeaderPC = iota
	Retry
	Renew
	Stopping
	LeaderDone
)

var leaderNames = [...]string{"Pending", "Retry", "Renew", "Stopping", "Done"}

func (p LeaderPC) String() string {
	if int(p) < len(leaderNames) {
		return leaderNames[p]
	}
	return fmt.Sprintf("LeaderPC(%d)", p)
}

// MarshalText writes the module's string for the control state.
func (p LeaderPC) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// StandbyPC is the standby's control state.
type StandbyPC uint8

// The standby's control states, as in the module.
const (
	Poll StandbyPC = iota
	Check
	Acquired
	Callback
	Running
)

var standbyNames = [...]string{"Poll", "Check", "Acquired", "Callback", "Running"}

func (p StandbyPC) String() string {
	if int(p) < len(standbyNames) {
		return standbyNames[p]
	}
	return fmt.Sprintf("StandbyPC(%d)", p)
}

// MarshalText writes the module's string for the control state.
func (p StandbyPC) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// State holds the module's twelve variables. It is comparable and small, so
// it serves directly as the key of the set of seen states.
type State struct {
	Now       int32     `json:"now"`
	Version   int32     `json:"version"`
	Seen      int32     `json:"seen"`
	Age       int32     `json:"age"`
	Committed bool      `json:"committed"`
	Leader    LeaderPC  `json:"leader"`
	Remaining int32     `json:"remaining"`
	Signalled bool      `json:"signalled"`
	OldAlive  bool      `json:"oldAlive"`
	Standby   StandbyPC `json:"standby"`
	PollLeft  int32     `json:"pollLeft"`
	NewAlive  bool      `json:"newAlive"`
}

func (s State) String() string {
	return fmt.Sprintf("now=%d version=%d seen=%d age=%d committed=%t leader=%s remaining=%d signalled=%t oldAlive=%t standby=%s pollLeft=%d newAlive=%t",
		s.Now, s.Version, s.Seen, s.Age, s.Committed, s.Leader, s.Remaining, s.Signalled, s.OldAlive, s.Standby, s.PollLeft, s.NewAlive)
}

// key packs a state whose fields are within TypeOK into 64 bits: now takes
// 16, age, remaining and pollLeft 11 each (one spare bit apiece, so values
// outside TypeOK by a little still pack distinctly), the rest 15.
func key(s State) uint64 {
	k := uint64(uint16(s.Now))
	k = k<<11 | uint64(s.Age)&0x7ff
	k = k<<11 | uint64(s.Remaining)&0x7ff
	k = k<<11 | uint64(s.PollLeft)&0x7ff
	k = k<<2 | uint64(s.Version)&3
	k = k<<2 | uint64(s.Seen)&3
	k = k<<3 | uint64(s.Leader)&7
	k = k<<3 | uint64(s.Standby)&7
	for _, b := range [...]bool{s.Committed, s.Signalled, s.OldAlive, s.NewAlive} {
		k <<= 1
		if b {
			k |= 1
		}
	}
	return k
}

func in(v int32, lo, hi int) bool { return int(v) >= lo && int(v) <= hi }

// TypeOK is the module's type invariant. The module bounds remaining by
// Renew, the largest value it ever assigns there; with other timings the
// bound is the largest of Retry, Renew and StopWait, which is Renew for the
// seed's values.
func (l Lease) TypeOK(s State) bool {
	return in(s.Now, 0, l.Limit()) &&
		in(s.Version, 0, 2) &&
		in(s.Seen, 0, 2) &&
		in(s.Age, 0, l.LeaseSpan) &&
		s.Leader <= LeaderDone &&
		s.Standby <= Running &&
		in(s.Remaining, 0, max(l.Retry, l.Renew, l.StopWait)) &&
		in(s.PollLeft, 0, l.PollHigh)
	// The four booleans are BOOLEAN by construction.
}

// ProcessExclusion == ~(oldAlive /\ newAlive)
func ProcessExclusion(s State) bool { return !(s.OldAlive && s.NewAlive) }

// Done == leader = "Done" /\ standby = "Running"
func Done(s State) bool { return s.Leader == LeaderDone && s.Standby == Running }

// Init is the module's only initial state: the incumbent is running; one
// final renewal commits before later requests fail.
func Init() State {
	return State{Leader: Pending, OldAlive: true, Standby: Poll}
}
