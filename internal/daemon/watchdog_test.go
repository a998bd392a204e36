package daemon

import (
	"math"
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
		{5 * time.Second, 10 * time.Second, 2 * time.Second, 13 * time.Second, false},    // the defaults: 10s stays
		{time.Second, 2 * time.Second, 2 * time.Second, time.Second, false},              // the fast profile: exactly 1s
		{200 * time.Millisecond, time.Second, 500 * time.Millisecond, time.Second, true}, // 700ms would fit: 1s is the floor
		{time.Second, 2 * time.Second, math.MaxInt64, time.Second, true},                 // TimeoutAbortSec=infinity
	} {
		fit, short := WatchdogFit(policy.Timing{Retry: c.retry, RenewDeadline: c.renew}, c.abort)
		if fit != c.fit || short != c.short {
			t.Errorf("retry %v, renew_deadline %v, TimeoutAbortSec %v: fit %v short %t, want %v %t",
				c.retry, c.renew, c.abort, fit, short, c.fit, c.short)
		}
	}
}
