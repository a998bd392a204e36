package daemon

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrapeText is the daemon's exposition, as its endpoint serves it.
func scrapeText(t *testing.T, d *Daemon) string {
	t.Helper()
	var b bytes.Buffer
	if _, err := d.metrics.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// scrapeFamilies is the daemon's exposition read with the client
// library's parser.
func scrapeFamilies(d *Daemon) (map[string]*dto.MetricFamily, error) {
	var b bytes.Buffer
	if _, err := d.metrics.WriteTo(&b); err != nil {
		return nil, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(&b)
}

// TestMetricsFollowTheLeaseThroughAStopFailure: the daemon's scrape shows
// the lease held here with its token and deadline, the acquisition
// counted; then a loss whose stop fails: the lease stays held and shows
// stop_failed, and the failure is counted; removed, its series go.
func TestMetricsFollowTheLeaseThroughAStopFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		store := newMemStore()
		d, logs := testDaemon(t, sd, store)
		d.UseMetrics()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		rec := store.record("db")
		if rec.Holder != "node-a" {
			t.Fatalf("not leading after 30s:\n%s", logs)
		}
		out := scrapeText(t, d)
		for _, want := range []string{
			`unitlease_lease_role{lease="db",role="leader"} 1`,
			`unitlease_acquisitions_total{lease="db"} 1`,
			`unitlease_unit_info{lease="db",unit="db.service"} 1`,
			`unitlease_leases 1`,
			`unitlease_redis_up 1`,
			`unitlease_node_drained 0`,
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("scrape lacks %s:\n%s", want, grepLines(out, "unitlease_"))
			}
		}
		st := d.find("db").Status()
		if !strings.Contains(out, `unitlease_lease_token{lease="db"} `) || st.Token == 0 {
			t.Errorf("no token (status token %d):\n%s", st.Token, grepLines(out, "token"))
		}
		if !strings.Contains(out, `unitlease_renewal_duration_seconds_count `) || strings.Contains(out, "unitlease_renewal_duration_seconds_count 0\n") {
			t.Errorf("no renewal measured:\n%s", grepLines(out, "renewal_duration_seconds_count"))
		}

		// The unit cannot be stopped, and the lease is lost.
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = true })
		store.steal("db", "node-b")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		out = scrapeText(t, d)
		for _, want := range []string{
			`unitlease_lease_stop_failed{lease="db"} 1`,
			`unitlease_losses_total{lease="db"} 1`,
			`unitlease_lease_role{lease="db",role="none"} 1`,
			// One per try, as the journal has them.
			fmt.Sprintf("unitlease_stop_failures_total %d", strings.Count(logs.String(), "UNITLEASE_EVENT=stop_failed UNITLEASE_HOLDER")),
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("after a loss whose stop failed, the scrape lacks %s:\n%s\n%s", want, grepLines(out, "unitlease_"), logs)
			}
		}

		// Unannotated and stopped: the lease's series go.
		sd.set(func(f *fakeSystemd) {
			f.stuck["db.service"] = false
			f.annotated = map[string]string{}
		})
		d.Reload(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if out := scrapeText(t, d); strings.Contains(out, `lease="db"`) || !strings.Contains(out, "unitlease_leases 0\n") {
			t.Errorf("an unmanaged lease's series stayed:\n%s", grepLines(out, "unitlease_"))
		}
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
