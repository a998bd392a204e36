package policy

import (
	"testing"
	"time"

	"github.com/unitlease/unitlease/spec"
)

// The timing sets the bound is checked against: the defaults and others,
// in whole seconds, each with poll sums that reach every instant
// (PollMax >= 2·PollMin-1, PollMin within the bound), where the spec's law
// is exact rather than only sufficient (see spec.Lease.SafeMinimum). All
// but the defaults allow a daemon 1s late; the model has no such delay.
var specTimings = withAllowance(s, []Timing{
	DefaultTiming(),
	{Retry: 1 * s, RenewDeadline: 3 * s, StopWait: 2 * s, ReplyMax: s / 2, PollMin: 1 * s, PollMax: 2 * s},
	{Retry: 2 * s, RenewDeadline: 8 * s, StopWait: 4 * s, ReplyMax: 1 * s, PollMin: 2 * s, PollMax: 5 * s},
	{Retry: 3 * s, RenewDeadline: 10 * s, StopWait: 30 * s, ReplyMax: 2 * s, PollMin: 4 * s, PollMax: 7 * s},
	{Retry: 7 * s, RenewDeadline: 14 * s, StopWait: 1 * s, ReplyMax: 3 * s, PollMin: 1 * s, PollMax: 1 * s},
	{Retry: 10 * s, RenewDeadline: 30 * s, StopWait: 15 * s, ReplyMax: 3 * s, PollMin: 3 * s, PollMax: 9 * s},
	{Retry: 20 * s, RenewDeadline: 40 * s, StopWait: 30 * s, ReplyMax: 4 * s, PollMin: 10 * s, PollMax: 25 * s},
})

// withAllowance sets the allowance of every timing that has none.
func withAllowance(a time.Duration, ts []Timing) []Timing {
	for i := range ts {
		if ts[i].Allowance == 0 {
			ts[i].Allowance = a
		}
	}
	return ts
}

// model is the spec instance for t with lease span span (whole seconds).
func model(t Timing, span, replyMax int) spec.Lease {
	sec := func(d time.Duration) int { return int(d / time.Second) }
	return spec.Lease{
		LeaseSpan: span, ReplyMax: replyMax,
		Retry: sec(t.Retry), Renew: sec(t.RenewDeadline), StopWait: sec(t.StopWait),
		PollLow: sec(t.PollMin), PollHigh: sec(t.PollMax),
	}
}

func excludes(t *testing.T, l spec.Lease) bool {
	t.Helper()
	ok, err := l.Excludes()
	if err != nil {
		t.Fatalf("%+v: %v", l, err)
	}
	return ok
}

// TestBoundAgreesWithSpec ties SafeMinimum to the model checker.
//
// Rule 1 in continuous time is lease_span > retry + renew_deadline +
// stop_wait (=: B), for a leader that acts on its deadline at once. The model counts whole seconds and lets the leader's
// Reap and the standby's Spawn fall in the same instant, so there the same
// inequality reads LeaseSpan >= B + 1: the smallest whole-second span that
// rule 1 admits, with ReplyMax 0 because the leader anchors its deadlines
// at the send of its last successful renewal. The checker must agree that
// this span is safe and that one second less (B itself) is not, which
// shows the rule is exactly as tight as the model and that everything
// SafeMinimum adds on top is margin, for drift and the allowance for a
// late daemon, which the model does not have. The derived span, rounded up to whole seconds, must then be
// safe in the model too, and exceed B + 1 by no more than its margin
// rounded up. Every whole-second span from B-2 to that is checked.
func TestBoundAgreesWithSpec(t *testing.T) {
	for _, tm := range specTimings {
		if err := tm.Validate(); err != nil {
			t.Fatal(err)
		}
		b := int((tm.Retry + tm.RenewDeadline + tm.StopWait) / s)
		derived := int((tm.SafeMinimum() + s - 1) / s)
		if got := model(tm, 1, 0).SafeMinimum(); got != b+1 {
			t.Fatalf("%+v: the spec's law says %d, rule 1 says %d", tm, got, b+1)
		}
		if extra, margin := derived-(b+1), int((tm.Margin()+s-1)/s); extra < 0 || extra > margin {
			t.Errorf("%+v: derived %ds is %ds above the model's minimum, margin %v", tm, derived, extra, tm.Margin())
		}
		for span := b - 2; span <= derived; span++ {
			if got, want := excludes(t, model(tm, span, 0)), span >= b+1; got != want {
				t.Errorf("%+v: lease span %ds: the checker says exclusion %t, rule 1 says %t", tm, span, got, want)
			}
		}
	}
}

// TestAnchorAtSendMatters shows why rule 1 anchors at the send: a leader
// that measured from the reply would be the model's ReplyMax = reply_max
// case, and the derived span would not be safe for it.
func TestAnchorAtSendMatters(t *testing.T) {
	checked := 0
	for _, tm := range specTimings {
		replyMax := int(tm.ReplyMax / s)
		derived := int((tm.SafeMinimum() + s - 1) / s)
		if replyMax == 0 || derived >= model(tm, 1, replyMax).SafeMinimum() {
			continue // the margin happens to cover reply_max here
		}
		if excludes(t, model(tm, derived, replyMax)) {
			t.Errorf("%+v: span %ds with ReplyMax %d: want a violation", tm, derived, replyMax)
		}
		checked++
	}
	if checked < 3 {
		t.Fatalf("only %d timing sets where the margin does not cover reply_max", checked)
	}
}
