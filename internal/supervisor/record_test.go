package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/redislease"
)

// TestRecordCarriesTheWritersSpan: the policy reads the writer's lease
// span from the record, which the standby waits out if it is the longer.
func TestRecordCarriesTheWritersSpan(t *testing.T) {
	rec := redislease.Record{Holder: "b", Version: 3, Token: strings.Repeat("b", 32), State: redislease.StateHeld, LeaseSpanMS: 60000}
	o := redislease.Observation{Name: "db", Raw: redislease.Encode(rec), Record: rec}
	if got := toPolicy(o); got.LeaseSpan != time.Minute || got.Holder != "b" || got.Version != 3 {
		t.Fatalf("toPolicy = %+v, want holder b at version 3 with a lease span of 1m", got)
	}
}
