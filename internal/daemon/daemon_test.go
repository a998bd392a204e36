package daemon

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
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

// TestRecordCarriesTheWritersSpan: the policy reads the writer's lease
// span from the record, which the standby waits out if it is the longer.
func TestRecordCarriesTheWritersSpan(t *testing.T) {
	rec := redislease.Record{Holder: "b", Version: 3, Token: strings.Repeat("b", 32), State: redislease.StateHeld, LeaseSpanMS: 60000}
	o := redislease.Observation{Name: "db", Raw: redislease.Encode(rec), Record: rec}
	if got := toPolicy(o); got.LeaseSpan != time.Minute || got.Holder != "b" || got.Version != 3 {
		t.Fatalf("toPolicy = %+v, want holder b at version 3 with a lease span of 1m", got)
	}
}
