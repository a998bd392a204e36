package spec

import "fmt"

// Failover is an instance of the TLA+ module LeaseFailover.tla: its
// constants. All times are in seconds, the model's ticks.
//
// LeaseSpan, MaxLag, Detect and Rule are the module's CONSTANTS: MaxLag is
// how long the old master may go on taking the leader's writes after it was
// cut off from its replicas and sentinels (min-replicas-max-lag), Detect how
// long after the cut the standby's store comes back under a new identity
// (down-after-milliseconds plus the failover's own time), and Rule switches
// the server identity rule on. Retry .. PollHigh are definitions in the
// module, as in Lease.tla; here they are parameters.
type Failover struct {
	LeaseSpan int  `json:"lease_span"`
	MaxLag    int  `json:"max_lag"`
	Detect    int  `json:"detect"`
	Rule      bool `json:"rule"`
	Retry     int  `json:"retry"`
	Renew     int  `json:"renew"`
	StopWait  int  `json:"stop_wait"`
	PollLow   int  `json:"poll_low"`
	PollHigh  int  `json:"poll_high"`
}

// SeedFailover returns the module with the given constants and its own
// timings (those of Lease.tla).
func SeedFailover(leaseSpan, maxLag, detect int, rule bool) Failover {
	return Failover{
		LeaseSpan: leaseSpan,
		MaxLag:    maxLag,
		Detect:    detect,
		Rule:      rule,
		Retry:     SeedRetry,
		Renew:     SeedRenew,
		StopWait:  SeedStopWait,
		PollLow:   SeedPollLow,
		PollHigh:  SeedPollHigh,
	}
}

// Validate checks the module's ASSUME (LeaseSpan \in Nat \ {0}, MaxLag and
// Detect in Nat) within the checker's bound MaxConstant, and what the
// parameters need: non-negative timings, 1 <= PollLow <= PollHigh, and
// Retry >= 1 (with no pause, a leader could renew without end at one
// instant).
func (f Failover) Validate() error {
	for _, c := range []struct {
		name     string
		v, least int
	}{
		{"LeaseSpan", f.LeaseSpan, 1},
		{"MaxLag", f.MaxLag, 0},
		{"Detect", f.Detect, 0},
		{"Retry", f.Retry, 1},
		{"Renew", f.Renew, 0},
		{"StopWait", f.StopWait, 0},
		{"PollLow", f.PollLow, 1},
		{"PollHigh", f.PollHigh, f.PollLow},
	} {
		if c.v < c.least || c.v > MaxConstant {
			return fmt.Errorf("%w: %s %d is not in %d..%d", ErrAssume, c.name, c.v, c.least, MaxConstant)
		}
	}
	return nil
}

// None == -1: nothing seen yet.
const None = -1

// CutMax == Retry + PollHigh: the latest cut.
func (f Failover) CutMax() int { return f.Retry + f.PollHigh }

// MaxTop == 3 + CutMax \div Retry: the old master's counted renewals come
// Retry apart until the cut, plus a release and an acquisition.
func (f Failover) MaxTop() int { return 3 + f.CutMax()/f.Retry }

// Settle == IF MaxLag + 1 > Detect THEN MaxLag + 1 ELSE Detect: from this
// long after the cut on, the old master takes no write and the rollback has
// happened, and the clock stops counting.
func (f Failover) Settle() int { return max(f.MaxLag+1, f.Detect) }

// FailoverState holds the module's nineteen variables. The module's clock
// counts to the cut, then from it, and stops at Settle: there is no
// absolute time, so states that differ only in when the cut came are one
// (FailoverTimes recovers the time of each step of a behaviour). It is
// comparable and small, so it serves directly as the key of the set of
// seen states.
type FailoverState struct {
	Clock     int16     `json:"clock"`
	Top       int16     `json:"top"`
	RelVer    int16     `json:"relVer"`
	Taken     bool      `json:"taken"`
	Cut       bool      `json:"cut"`
	Frozen    int16     `json:"frozen"`
	Rolled    bool      `json:"rolled"`
	Leader    LeaderPC  `json:"leader"`
	Remaining int16     `json:"remaining"`
	Signalled bool      `json:"signalled"`
	OldAlive  bool      `json:"oldAlive"`
	Leaving   bool      `json:"leaving"`
	Standby   StandbyPC `json:"standby"`
	Seen      int16     `json:"seen"`
	SeenID    int16     `json:"seenId"`
	Age       int16     `json:"age"`
	Witnessed bool      `json:"witnessed"`
	PollLeft  int16     `json:"pollLeft"`
	NewAlive  bool      `json:"newAlive"`
}

func (s FailoverState) String() string {
	return fmt.Sprintf("clock=%d top=%d relVer=%d taken=%t cut=%t frozen=%d rolled=%t leader=%s remaining=%d signalled=%t oldAlive=%t leaving=%t standby=%s seen=%d seenId=%d age=%d witnessed=%t pollLeft=%d newAlive=%t",
		s.Clock, s.Top, s.RelVer, s.Taken, s.Cut, s.Frozen, s.Rolled, s.Leader, s.Remaining, s.Signalled, s.OldAlive, s.Leaving,
		s.Standby, s.Seen, s.SeenID, s.Age, s.Witnessed, s.PollLeft, s.NewAlive)
}

func in16(v int16, lo, hi int) bool { return int(v) >= lo && int(v) <= hi }

// TypeOK is the module's type invariant; remaining is bounded by the
// largest of Retry, Renew and StopWait (Renew for the seed), as in Lease.
func (f Failover) TypeOK(s FailoverState) bool {
	top := f.MaxTop()
	return in16(s.Clock, 0, max(f.CutMax(), f.Settle())) &&
		in16(s.Top, 1, top) &&
		in16(s.RelVer, 0, top) &&
		in16(s.Frozen, 0, top) &&
		(s.Leader == Retry || s.Leader == Renew || s.Leader == Stopping || s.Leader == LeaderDone) &&
		in16(s.Remaining, 0, max(f.Retry, f.Renew, f.StopWait)) &&
		s.Standby <= Running &&
		in16(s.Seen, None, top) &&
		in16(s.SeenID, 0, 1) &&
		in16(s.Age, 0, f.LeaseSpan) &&
		in16(s.PollLeft, 0, f.PollHigh)
	// The eight booleans are BOOLEAN by construction.
}

// FailoverDone == leader = "Done" /\ standby = "Running"
func FailoverDone(s FailoverState) bool { return s.Leader == LeaderDone && s.Standby == Running }

// FailoverExclusion is the module's ProcessExclusion: ~(oldAlive /\ newAlive).
func FailoverExclusion(s FailoverState) bool { return !(s.OldAlive && s.NewAlive) }

// Init is the module's only initial state: the incumbent runs; its renewal
// (version 1, over the released record 0 that preceded its tenure)
// committed at time 0 and it saw the reply at once.
func (f Failover) Init() FailoverState {
	return FailoverState{
		Top: 1, Leader: Retry, Remaining: int16(f.Retry),
		OldAlive: true, Standby: Poll, Seen: None,
	}
}

// Released(v) == v = 0 \/ v = relVer
func (s FailoverState) Released(v int16) bool { return v == 0 || v == s.RelVer }

// LeaderHolds == ~taken /\ top /= relVer: the old master's latest record is
// one of the leader's renewals.
func (s FailoverState) LeaderHolds() bool { return !s.Taken && s.Top != s.RelVer }

// Accepts == ~cut \/ clock <= MaxLag
func (f Failover) Accepts(s FailoverState) bool { return !s.Cut || int(s.Clock) <= f.MaxLag }

// Reachable == ~cut \/ rolled
func (s FailoverState) Reachable() bool { return !s.Cut || s.Rolled }

// Current == IF rolled THEN frozen ELSE top
func (s FailoverState) Current() int16 {
	if s.Rolled {
		return s.Frozen
	}
	return s.Top
}

// Ident == IF rolled THEN 1 ELSE 0
func (s FailoverState) Ident() int16 {
	if s.Rolled {
		return 1
	}
	return 0
}
