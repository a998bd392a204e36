package policy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/spec"
)

const s = time.Second

func TestDefaultTimingIsTheSeed(t *testing.T) {
	d := DefaultTiming()
	seed := spec.Seed(36, 0)
	for _, c := range []struct {
		key  string
		got  time.Duration
		want int
	}{
		{"retry", d.Retry, seed.Retry},
		{"renew_deadline", d.RenewDeadline, seed.Renew},
		{"stop_wait", d.StopWait, seed.StopWait},
		{"poll_min", d.PollMin, seed.PollLow},
		{"poll_max", d.PollMax, seed.PollHigh},
	} {
		if c.got != time.Duration(c.want)*s {
			t.Errorf("%s = %v, the seed says %ds", c.key, c.got, c.want)
		}
	}
	if d.ReplyMax != 2*s || d.LeaseSpan != 0 {
		t.Errorf("reply_max %v lease_span %v, want 2s and 0 (derived)", d.ReplyMax, d.LeaseSpan)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSafeMinimumDefaults(t *testing.T) {
	d := DefaultTiming()
	// (35 s + 4.167 s) × 1.001 / 0.999 = 39.2454 s; the next whole ms above.
	if got, want := d.SafeMinimum(), 39246*time.Millisecond; got != want {
		t.Fatalf("SafeMinimum = %v, want %v", got, want)
	}
	if got, want := d.Margin(), 4246*time.Millisecond; got != want {
		t.Fatalf("Margin = %v, want %v", got, want)
	}
	r, err := d.Resolved()
	if err != nil || r.LeaseSpan != d.SafeMinimum() {
		t.Fatalf("Resolved: %v %v", r.LeaseSpan, err)
	}
	d.LeaseSpan = 40 * s
	if r, _ := d.Resolved(); r.LeaseSpan != 40*s {
		t.Fatalf("a larger lease_span is kept, got %v", r.LeaseSpan)
	}
}

// The bound covers what it claims: a leader whose clock runs slow by ρ and
// acts the allowance late is done before a standby whose clock runs fast
// by ρ counts the lease span, for every valid timing corner.
func TestSafeMinimumCoversDriftAndDelay(t *testing.T) {
	const rho = float64(DriftPPM) / 1e6
	for _, sum := range []time.Duration{3 * time.Millisecond, time.Second, 35 * s, 3 * time.Hour} {
		tm := Timing{Retry: sum / 3, RenewDeadline: sum / 3, StopWait: sum - 2*(sum/3), Allowance: DefaultAllowance}
		leaderDone := float64(sum+tm.Allowance) * (1 + rho)
		standbyEarliest := float64(tm.SafeMinimum()) * (1 - rho)
		if standbyEarliest <= leaderDone {
			t.Errorf("sum %v: standby at %.0fns is not after the leader at %.0fns", sum, standbyEarliest, leaderDone)
		}
		if slack := standbyEarliest - leaderDone; slack > float64(2*time.Millisecond) {
			t.Errorf("sum %v: %.0fns more than the first whole millisecond", sum, slack)
		}
	}
}

func TestValidateRejects(t *testing.T) {
	for _, c := range []struct {
		edit func(*Timing)
		want string
	}{
		{func(t *Timing) { t.LeaseSpan = 30 * s },
			"policy: lease_span 30s is below the safe minimum 39.246s (retry 5s + renew_deadline 20s + stop_wait 10s + margin 4.246s: the allowance 4.167s for a daemon that acts late, which unitlease.service's WatchdogSec= and TimeoutAbortSec= set, and clock drift)"},
		{func(t *Timing) { t.LeaseSpan = 39245 * time.Millisecond },
			"policy: lease_span 39.245s is below the safe minimum 39.246s (retry 5s + renew_deadline 20s + stop_wait 10s + margin 4.246s: the allowance 4.167s for a daemon that acts late, which unitlease.service's WatchdogSec= and TimeoutAbortSec= set, and clock drift)"},
		{func(t *Timing) { t.Allowance = 0 },
			"policy: allowance 0s must be positive"},
		{func(t *Timing) { t.ReplyMax = 5 * s },
			"policy: reply_max 5s must be below retry 5s, so that a renewal's reply arrives before the next renewal is due"},
		{func(t *Timing) { t.RenewDeadline = time.Second },
			"policy: reply_max 2s must be below renew_deadline 1s, or no renewal can complete before the deadline"},
		{func(t *Timing) { t.PollMin = 12 * s },
			"policy: poll_min 12s is above poll_max 11s"},
		{func(t *Timing) { t.Retry = 0 },
			"policy: retry 0s must be positive"},
		{func(t *Timing) { t.StopWait = -time.Second },
			"policy: stop_wait -1s must be positive"},
		{func(t *Timing) { t.LeaseSpan = -time.Second },
			"policy: lease_span -1s must be positive, or 0 to derive it"},
		{func(t *Timing) { t.PollMax = time.Hour + time.Nanosecond },
			"policy: poll_max 1h0m0.000000001s is above the limit of 1h0m0s"},
		{func(t *Timing) { t.LeaseSpan = 2 * time.Hour },
			"policy: lease_span 2h0m0s is above the limit of 1h0m0s"},
	} {
		tm := DefaultTiming()
		c.edit(&tm)
		err := tm.Validate()
		if err == nil || err.Error() != c.want || !errors.Is(err, ErrTiming) {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
		if _, err := New(Config{Timing: tm}); !errors.Is(err, ErrTiming) {
			t.Errorf("New accepts what Validate rejects: %v", err)
		}
	}
}

// TestDerivedLeaseSpanWithinTheLimit: a lease span derived above the
// limit no record may carry (1 h) is refused: the node's own records
// would be unreadable.
func TestDerivedLeaseSpanWithinTheLimit(t *testing.T) {
	tm := DefaultTiming()
	tm.StopWait = time.Hour
	if _, err := tm.Resolved(); err == nil || !strings.Contains(err.Error(), "is above the limit of 1h0m0s") {
		t.Fatalf("stop_wait 1h: %v", err)
	}
}

// TestValidateRefusesBusyLoops: intervals that would poll or renew in a
// busy loop are refused with the floor and why.
func TestValidateRefusesBusyLoops(t *testing.T) {
	for _, c := range []struct {
		edit func(*Timing)
		want string
	}{
		{func(t *Timing) { t.PollMin, t.PollMax = 1, 1 }, "policy: poll_min 1ns is below 50ms: polls more often than that only load Redis"},
		{func(t *Timing) { t.PollMax = 49 * time.Millisecond; t.PollMin = t.PollMax }, "policy: poll_min 49ms is below 50ms"},
		{func(t *Timing) { t.Retry = 2 }, "policy: retry 2ns is below 50ms: renewals more often than that only load Redis"},
		{func(t *Timing) { t.ReplyMax = 999 * time.Microsecond }, "policy: reply_max 999µs is below 1ms: no Redis answers sooner"},
	} {
		tm := DefaultTiming()
		c.edit(&tm)
		if err := tm.Validate(); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("got %v\nwant %s...", err, c.want)
		}
	}
}

func TestValidateAcceptsLimits(t *testing.T) {
	for _, tm := range []Timing{
		{Retry: 10 * time.Minute, RenewDeadline: 20 * time.Minute, StopWait: 15 * time.Minute, ReplyMax: 10*time.Minute - 1, PollMin: time.Hour, PollMax: time.Hour, Allowance: 10 * time.Minute},
		{Retry: MinInterval, RenewDeadline: MinReplyMax + 1, StopWait: 1, ReplyMax: MinReplyMax, PollMin: MinInterval, PollMax: MinInterval, Allowance: 1},
		{Retry: 5 * s, RenewDeadline: 20 * s, StopWait: 10 * s, ReplyMax: 2 * s, PollMin: 5 * s, PollMax: 5 * s, Allowance: DefaultAllowance, LeaseSpan: 39246 * time.Millisecond},
	} {
		if err := tm.Validate(); err != nil {
			t.Errorf("%+v: %v", tm, err)
		}
	}
}

// A caller reads the key with errors.As: the one the sentence names first.
func TestValidateErrorKeys(t *testing.T) {
	for _, c := range []struct {
		edit func(*Timing)
		key  string
	}{
		{func(t *Timing) { t.ReplyMax = 5 * s }, "reply_max"},
		{func(t *Timing) { t.RenewDeadline = time.Second }, "reply_max"},
		{func(t *Timing) { t.PollMin = 12 * s }, "poll_min"},
		{func(t *Timing) { t.PollMax = time.Second }, "poll_min"},
		{func(t *Timing) { t.LeaseSpan = 30 * s }, "lease_span"},
		{func(t *Timing) { t.LeaseSpan = -time.Second }, "lease_span"},
		{func(t *Timing) { t.Retry = 0 }, "retry"},
		{func(t *Timing) { t.RenewDeadline = 0 }, "renew_deadline"},
		{func(t *Timing) { t.StopWait = 2 * time.Hour }, "stop_wait"},
		{func(t *Timing) { t.PollMax = time.Hour + 1 }, "poll_max"},
	} {
		tm := DefaultTiming()
		c.edit(&tm)
		err := tm.Validate()
		var te *TimingError
		if !errors.As(err, &te) {
			t.Errorf("%v: not a *TimingError", err)
			continue
		}
		if te.Key != c.key || err.Error() != "policy: "+te.Msg || !errors.Is(err, ErrTiming) {
			t.Errorf("%v: key %q msg %q, want key %q", err, te.Key, te.Msg, c.key)
		}
		if _, err := tm.Resolved(); !errors.As(err, &te) || te.Key != c.key {
			t.Errorf("Resolved: %v", err)
		}
	}
}
