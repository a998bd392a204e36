package metrics

import (
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/unitlease/unitlease/policy"
)

// TestBreakMetricsMeterCallsForgetAndScrapesAtOnce: leases' meters count
// (answers from two servers, journal events, garbage) while leases are
// forgotten and made anew and the registry is gathered: nothing races
// (-race), every scrape parses, and a meter kept by a supervisor that ended
// after its Forget counts nothing into the series of the lease made anew
// under the same name.
func TestBreakMetricsMeterCallsForgetAndScrapesAtOnce(t *testing.T) {
	src := &fakeSource{leases: leases(3), up: true}
	m := newTest(t, src)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				l := m.Lease("lease-0001")
				l.Answered(policy.Renew, policy.Event{Kind: policy.RenewOK, Record: policy.Record{Server: []string{"a:1", "b:2"}[(n+i)%2]}}, time.Millisecond)
				l.Answered(policy.Renew, policy.Event{Kind: policy.RenewFailed}, time.Second)
				l.Journaled(policy.JournalAcquired, policy.CauseNone)
				l.Journaled(policy.JournalReleased, policy.CauseHandoff)
				l.Garbage()
				if n%7 == 0 {
					m.Forget("lease-0001")
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			var b strings.Builder
			w := io.Writer(&b)
			if i%20 != 0 {
				w = io.Discard
			}
			if _, err := m.WriteTo(w); err != nil {
				t.Errorf("WriteTo: %v", err)
				return
			}
			if i%20 == 0 {
				p := expfmt.NewTextParser(model.UTF8Validation)
				if _, err := p.TextToMetricFamilies(strings.NewReader(b.String())); err != nil {
					t.Errorf("parse: %v", err)
					return
				}
			}
		}
		close(stop)
	})
	wg.Wait()
	m.Lease("lease-0001") // whatever the last Forget removed

	old := m.Lease("lease-0002")
	m.Forget("lease-0002")
	fresh := m.Lease("lease-0002")
	old.Journaled(policy.JournalAcquired, policy.CauseNone) // the ended supervisor's last word
	fresh.Journaled(policy.JournalAcquired, policy.CauseNone)
	if got := m.Lease("lease-0002").acquired.Load(); got != 1 {
		t.Errorf("acquisitions of the lease made anew: %v, want 1", got)
	}
	out := scrape(t, m)
	if got := metricValueOf(out, `unitlease_acquisitions_total{lease="lease-0002"}`); got != "1" {
		t.Errorf("the scrape shows acquisitions of the lease made anew as %q, want 1:\n%s", got, grep(out, "acquisitions"))
	}
}

// metricValueOf is the value of one series in a scrape, or "".
func metricValueOf(scrape, series string) string {
	for _, line := range strings.Split(scrape, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}
