package policy

import (
	"errors"
	"fmt"
	"time"
)

// Timing holds the [timing] keys of unitlease.toml. Every value is measured
// on one node's monotonic clock.
type Timing struct {
	Retry         time.Duration // retry: the leader's pause after a successful renewal
	RenewDeadline time.Duration // renew_deadline: the leader stops after retry plus this without a renewal
	StopWait      time.Duration // stop_wait: the bound on stopping the unit, SIGKILL inside it
	ReplyMax      time.Duration // reply_max: the timeout of every store request
	PollMin       time.Duration // poll_min: the standby's shortest poll interval
	PollMax       time.Duration // poll_max: the standby's longest poll interval
	LeaseSpan     time.Duration // lease_span: 0 means SafeMinimum

	// Allowance bounds how late the leader may begin its stop after its
	// deadline: the longest a daemon that no longer acts on its deadlines
	// lives before systemd kills it (its watchdog and abort timeouts),
	// after which BindsTo= stops its units within stop_wait. It is no key
	// of unitlease.toml: `run` and `check` compute it from
	// unitlease.service as systemd loaded it. One allowance covers every
	// way of acting late, a timer that fires late, a loaded machine, a
	// frozen daemon: a daemon later than this is killed.
	Allowance time.Duration
}

// DefaultTiming returns the default timing (the specification's
// constants: Retry 5, Renew 20, StopWait 10, PollLow 5, PollHigh 11),
// with the allowance of the packaged unitlease.service; the lease span is
// left to be derived.
func DefaultTiming() Timing {
	return Timing{
		Retry:         5 * time.Second,
		RenewDeadline: 20 * time.Second,
		StopWait:      10 * time.Second,
		ReplyMax:      2 * time.Second,
		PollMin:       5 * time.Second,
		PollMax:       11 * time.Second,
		Allowance:     DefaultAllowance,
	}
}

// The assumptions behind the margin; README.md says why these values.
const (
	// DriftPPM bounds how far each node's CLOCK_MONOTONIC may run from true
	// time, in parts per million. Two nodes may differ by twice this.
	DriftPPM = 1000
	// SchedulingDelay bounds how late a standby takes its poll: a timer
	// that fires late, a GC pause, a loaded machine.
	SchedulingDelay = time.Second
	// DefaultAllowance is the allowance of the packaged unitlease.service:
	// WatchdogSec=2s, a third of it for the check of the loops,
	// TimeoutAbortSec=1s, and twice systemd's 250 ms timer slack (the
	// daemon's KillAllowance).
	DefaultAllowance = 4167 * time.Millisecond
	// MaxDuration is the largest value any timing key accepts.
	MaxDuration = time.Hour
)

// ErrTiming is wrapped by every error Validate returns.
var ErrTiming = errors.New("policy: invalid timing")

// TimingError is one sentence about one broken inequality; it matches
// ErrTiming. Validate returns it as a *TimingError.
type TimingError struct {
	// Key is the [timing] key the sentence is about, the one it names
	// first: "retry", "reply_max", "poll_min", "lease_span", ...
	Key string
	// Msg is the sentence, with the numbers; it starts with Key.
	Msg string
}

func (e *TimingError) Error() string        { return "policy: " + e.Msg }
func (e *TimingError) Is(target error) bool { return target == ErrTiming }

// badTiming starts the sentence with key, so the key is always the one
// named first.
func badTiming(key, format string, args ...any) error {
	return &TimingError{Key: key, Msg: key + " " + fmt.Sprintf(format, args...)}
}

// leaderBound is how long after the send of its last successful renewal
// the leader's copy may live, on the leader's own clock: its deadline
// (retry + renew_deadline), as late as the allowance lets it act on it,
// and the stop.
func (t Timing) leaderBound() time.Duration {
	return t.Retry + t.RenewDeadline + t.Allowance + t.StopWait
}

// SafeMinimum is the smallest lease span this package accepts: the first
// whole millisecond above
//
//	(retry + renew_deadline + allowance + stop_wait) * (1 + ρ) / (1 - ρ)
//
// with ρ = DriftPPM / 10⁶. The leader's copy is dead within the numerator
// of true time after the send of its last successful renewal (its clock may
// run slow by ρ, and it acts on its deadline within the allowance, or is
// killed); a standby measures the lease span from a moment no earlier than
// that renewal's commit, on a clock that may run fast by ρ. Neither poll
// jitter nor reply_max enters: a standby's age starts when it receives a
// reply, which is after the value was written, so both only make it later.
func (t Timing) SafeMinimum() time.Duration {
	return aboveScaled(t.leaderBound(), 0)
}

// CrashBound is the longest a crash of a holder can leave a lease without
// a holder, from its last renewal to a standby's acquisition, with every
// node on timing t: the reply that still shows the renewal before, a poll
// and a reply to see the last one, the lease span, a poll and a reply to
// see it over, and the acquisition's reply.
func (t Timing) CrashBound() time.Duration {
	return t.LeaseSpan + 2*t.PollMax + 4*t.ReplyMax
}

// Margin is SafeMinimum less retry + renew_deadline + stop_wait: the
// allowance and the clock drift.
func (t Timing) Margin() time.Duration {
	return t.SafeMinimum() - (t.Retry + t.RenewDeadline + t.StopWait)
}

// aboveScaled returns the first whole millisecond above
// (d·(1+ρ) + extra) / (1-ρ), computed in microseconds (exact for every d
// Validate accepts, with no overflow).
func aboveScaled(d, extra time.Duration) time.Duration {
	const million = 1_000_000
	us := (d + time.Microsecond - 1) / time.Microsecond
	num := int64(us)*(million+DriftPPM) + int64(extra/time.Microsecond)*million
	den := int64(million - DriftPPM)
	scaledUS := (num + den - 1) / den
	return (time.Duration(scaledUS)/1000 + 1) * time.Millisecond
}

// observeGap bounds the time from the send of one successful observation
// to the receipt of the next. A standby that sees a missing key on both
// sides of a longer gap starts its age over: only absence can repeat, and
// a record may have come and gone unseen in between. Natural polling stays
// within it: a reply, a poll interval, a reply, and SchedulingDelay.
func (t Timing) observeGap() time.Duration {
	return t.PollMax + 2*t.ReplyMax + SchedulingDelay
}

// confirmWait is how long a node that acquired over a missing key waits,
// on its own clock, before the renewal that lets it start: long enough
// that any standby polling within observeGap (on a clock that may differ
// by 2ρ) has read the record at least once.
func (t Timing) confirmWait() time.Duration {
	return aboveScaled(t.observeGap(), 0)
}

// ConfirmWait is how long a node that acquired over a missing key (a
// cold start, a Redis that lost its data) holds the lease before it
// starts the units.
func (t Timing) ConfirmWait() time.Duration { return t.confirmWait() }

// Backoff is how long a node that gave a lease up (a handoff, a failed
// unit, a renewal deadline) leaves it to its peers before it competes
// for it again.
func (t Timing) Backoff() time.Duration { return t.backoff() }

// backoff is how long a node that released the lease leaves it to a peer:
// a peer polls at least every poll_max, and a lease span keeps a unit that
// fails everywhere from moving back and forth faster than that.
func (t Timing) backoff() time.Duration {
	return t.LeaseSpan + t.PollMax
}

// Validate reports the first inequality t breaks, in one sentence with the
// numbers: non-positive or over-an-hour values, reply_max not below retry
// or renew_deadline, poll_min above poll_max, and a lease span below
// SafeMinimum. A zero LeaseSpan is valid: it means SafeMinimum. The error
// is a *TimingError.
func (t Timing) Validate() error {
	for _, k := range t.keys() {
		if err := k.check(); err != nil {
			return err
		}
	}
	switch {
	case t.ReplyMax >= t.Retry:
		return badTiming("reply_max", "%v must be below retry %v, so that a renewal's reply arrives before the next renewal is due", t.ReplyMax, t.Retry)
	case t.ReplyMax >= t.RenewDeadline:
		return badTiming("reply_max", "%v must be below renew_deadline %v, or no renewal can complete before the deadline", t.ReplyMax, t.RenewDeadline)
	case t.PollMin > t.PollMax:
		return badTiming("poll_min", "%v is above poll_max %v", t.PollMin, t.PollMax)
	case t.SafeMinimum() > MaxDuration:
		return badTiming("lease_span", "the lease span these values need, %v (retry %v + renew_deadline %v + stop_wait %v + margin %v), is above the limit of %v",
			t.SafeMinimum(), t.Retry, t.RenewDeadline, t.StopWait, t.Margin(), MaxDuration)
	case t.LeaseSpan != 0 && t.LeaseSpan < t.SafeMinimum():
		return badTiming("lease_span", "%v is below the safe minimum %v (retry %v + renew_deadline %v + stop_wait %v + margin %v: the allowance %v for a daemon that acts late, which unitlease.service's WatchdogSec= and TimeoutAbortSec= set, and clock drift)",
			t.LeaseSpan, t.SafeMinimum(), t.Retry, t.RenewDeadline, t.StopWait, t.Margin(), t.Allowance)
	}
	return nil
}

// Resolved validates t and returns it with LeaseSpan set: SafeMinimum when
// it was zero.
func (t Timing) Resolved() (Timing, error) {
	if err := t.Validate(); err != nil {
		return Timing{}, err
	}
	if t.LeaseSpan == 0 {
		t.LeaseSpan = t.SafeMinimum()
	}
	return t, nil
}

type timingKey struct {
	name     string
	value    time.Duration
	zeroOK   bool
	zeroNote string
	least    time.Duration // the smallest value that is not a busy loop
	why      string
}

// The smallest retry and poll intervals: below them a lease's loop
// hammers Redis (a thousand leases polled every 50 ms are 20,000 reads a
// second) for no gain in failover time, which the lease span dominates.
const (
	MinInterval = 50 * time.Millisecond
	MinReplyMax = time.Millisecond
)

func (t Timing) keys() []timingKey {
	return []timingKey{
		{name: "retry", value: t.Retry, least: MinInterval, why: "renewals more often than that only load Redis"},
		{name: "renew_deadline", value: t.RenewDeadline},
		{name: "stop_wait", value: t.StopWait},
		{name: "reply_max", value: t.ReplyMax, least: MinReplyMax, why: "no Redis answers sooner"},
		{name: "poll_min", value: t.PollMin, least: MinInterval, why: "polls more often than that only load Redis"},
		{name: "poll_max", value: t.PollMax, least: MinInterval, why: "polls more often than that only load Redis"},
		{name: "lease_span", value: t.LeaseSpan, zeroOK: true, zeroNote: ", or 0 to derive it"},
		{name: "allowance", value: t.Allowance},
	}
}

func (k timingKey) check() error {
	switch {
	case k.value < 0 || k.value == 0 && !k.zeroOK:
		return badTiming(k.name, "%v must be positive%s", k.value, k.zeroNote)
	case k.value > MaxDuration:
		return badTiming(k.name, "%v is above the limit of %v", k.value, MaxDuration)
	case k.value != 0 && k.value < k.least:
		return badTiming(k.name, "%v is below %v: %s", k.value, k.least, k.why)
	}
	return nil
}
