//go:build breaks

package policy

import (
	"testing"
	"time"
)

// TestBreakSecResolvedLeaseSpanWithinMaxDuration: each key is bounded by
// MaxDuration, and a lease_span written out is too, but the derived one
// is not: records carry it as lease_span_ms, and redislease refuses any
// above MaxDuration (its Decode and the unit-key Lua), so a node with
// such a timing writes only records it reads back as garbage.
func TestBreakSecResolvedLeaseSpanWithinMaxDuration(t *testing.T) {
	for _, mod := range []struct {
		name string
		f    func(*Timing)
	}{
		{"stop_wait 1h", func(t *Timing) { t.StopWait = time.Hour }},
		{"renew_deadline 40m, stop_wait 30m", func(t *Timing) { t.RenewDeadline, t.StopWait = 40*time.Minute, 30*time.Minute }},
		{"allowance 1h (WatchdogSec and TimeoutAbortSec near their limit)", func(t *Timing) { t.Allowance = time.Hour }},
	} {
		tm := DefaultTiming()
		mod.f(&tm)
		r, err := tm.Resolved()
		if err == nil && r.LeaseSpan > MaxDuration {
			t.Errorf("%s: accepted, lease span %v above MaxDuration %v", mod.name, r.LeaseSpan, MaxDuration)
		}
	}
}
