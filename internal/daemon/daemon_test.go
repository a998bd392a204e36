package daemon

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/policy"
)

func TestWatchdogFit(t *testing.T) {
	for _, c := range []struct {
		retry, renew, abort time.Duration
		fit                 time.Duration
		short               bool
	}{
		{5 * time.Second, 10 * time.Second, 2 * time.Second, 13 * time.Second, false},      // the defaults: 10s stays
		{time.Second, 2 * time.Second, 2 * time.Second, time.Second, false},                // the fast profile: exactly 1s
		{200 * time.Millisecond, time.Second, 500 * time.Millisecond, time.Second, true},   // 700ms would fit: 1s is the floor
		{time.Second, 2 * time.Second, math.MaxInt64, time.Second, true},                   // TimeoutAbortSec=infinity
		{300 * time.Millisecond, 600 * time.Millisecond, math.MaxInt64, time.Second, true}, // infinity with under 1s of budget
	} {
		f := FitWatchdog(policy.Timing{Retry: c.retry, RenewDeadline: c.renew}, c.abort)
		if fit, short := f.Max, f.Short(); fit != c.fit || short != c.short {
			t.Errorf("retry %v, renew_deadline %v, TimeoutAbortSec %v: fit %v short %t, want %v %t",
				c.retry, c.renew, c.abort, fit, short, c.fit, c.short)
		}
	}
	// 200ms + 1s of budget less 500ms of abort leaves 700ms: 1s of
	// watchdog overruns the deadline by 300ms.
	f := FitWatchdog(policy.Timing{Retry: 200 * time.Millisecond, RenewDeadline: time.Second}, 500*time.Millisecond)
	if f.Overrun != 300*time.Millisecond || !strings.Contains(f.ShortWarning("u.service", policy.Timing{}, 0), "outlive its deadline by 300ms") {
		t.Errorf("overrun %v, warning %q; want 300ms", f.Overrun, f.ShortWarning("u.service", policy.Timing{}, 0))
	}
}

// TestReconcile: which leases a reload removes (hands off, releases,
// unmanages) and which it adds, given the running set and what discovery
// found.
func TestReconcile(t *testing.T) {
	for _, c := range []struct {
		name           string
		current, found map[string][]string
		remove, add    []string
	}{
		{"nothing", nil, nil, nil, nil},
		{"first discovery", nil, map[string][]string{"db": {"db.service"}, "vpn": {"vpn.service"}}, nil, []string{"db", "vpn"}},
		{"unchanged", map[string][]string{"db": {"db.service"}}, map[string][]string{"db": {"db.service"}}, nil, nil},
		{"annotation removed", map[string][]string{"db": {"db.service"}, "vpn": {"vpn.service"}}, map[string][]string{"vpn": {"vpn.service"}}, []string{"db"}, nil},
		{"unit joins a group", map[string][]string{"db": {"a.service"}}, map[string][]string{"db": {"a.service", "b.service"}}, []string{"db"}, []string{"db"}},
		{"unit leaves a group", map[string][]string{"db": {"a.service", "b.service"}}, map[string][]string{"db": {"a.service"}}, []string{"db"}, []string{"db"}},
		{"unit moves to another lease", map[string][]string{"old": {"a.service"}}, map[string][]string{"new": {"a.service"}}, []string{"old"}, []string{"new"}},
		{"everything gone", map[string][]string{"a": {"a.service"}, "b": {"b.service"}}, map[string][]string{}, []string{"a", "b"}, nil},
	} {
		remove, add := reconcile(c.current, c.found)
		if !slices.Equal(remove, c.remove) || !slices.Equal(add, c.add) {
			t.Errorf("%s: remove %v, add %v; want %v, %v", c.name, remove, add, c.remove, c.add)
		}
	}
}
