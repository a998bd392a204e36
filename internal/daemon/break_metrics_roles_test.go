package daemon

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// bmScrape reads d's exposition and checks what must hold of every
// scrape: one role series per lease, no negative age or deadline, a
// token and a deadline only for a leader. It returns each lease's role.
func bmScrape(t *testing.T, d *Daemon) (roles map[string]string, counters map[string]float64) {
	t.Helper()
	mfs, err := scrapeFamilies(d)
	if err != nil {
		t.Errorf("scrape: %v", err)
		return nil, nil
	}
	roles, counters = map[string]string{}, map[string]float64{}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	held := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			lease := label(m, "lease")
			switch mf.GetName() {
			case nameRoleForTest:
				if _, dup := roles[lease]; dup {
					t.Errorf("lease %s has two role series", lease)
				}
				roles[lease] = label(m, "role")
			case "unitlease_lease_age_seconds", "unitlease_lease_deadline_seconds":
				if v := m.GetGauge().GetValue(); v < 0 {
					t.Errorf("%s{lease=%q} = %v < 0", mf.GetName(), lease, v)
				}
				if mf.GetName() == "unitlease_lease_deadline_seconds" {
					held[lease] = true
				}
			case "unitlease_lease_token":
				held[lease] = true
				if m.GetGauge().GetValue() <= 0 {
					t.Errorf("token of %s is %v", lease, m.GetGauge().GetValue())
				}
			case "unitlease_acquisitions_total":
				counters[lease] = m.GetCounter().GetValue()
			}
		}
	}
	for lease := range held {
		if roles[lease] != "leader" {
			t.Errorf("lease %s has a token or deadline but role %q", lease, roles[lease])
		}
	}
	return roles, counters
}

const nameRoleForTest = "unitlease_lease_role"

// TestBreakMetricsScrapesAcrossDisableReannotateAndStopFailure scrapes
// every 100 ms while the lease is disabled, enabled, re-annotated with
// another unit set (removed and added anew under the same name), and
// lost with a stop that fails: every scrape is consistent, none blocks a
// step (the lease keeps moving), and the re-added lease's acquisitions
// are exported, not counted into the series Forget removed.
func TestBreakMetricsScrapesAcrossDisableReannotateAndStopFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		store := newMemStore()
		d, logs := testDaemon(t, sd, store)
		d.UseMetrics()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
					bmScrape(t, d)
				}
			}
		})
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if roles, n := bmScrape(t, d); roles["db"] != "leader" || n["db"] != 1 {
			t.Fatalf("after 30s: roles %v, acquisitions %v\n%s", roles, n, logs)
		}

		store.disable("db", true)
		d.round(ctx, true)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if roles, _ := bmScrape(t, d); roles["db"] != "none" {
			t.Errorf("disabled: role %q, want none", roles["db"])
		}
		store.disable("db", false)
		d.round(ctx, true)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if roles, n := bmScrape(t, d); roles["db"] != "leader" || n["db"] != 2 {
			t.Errorf("enabled again: role %q, acquisitions %v, want leader, 2\n%s", roles["db"], n["db"], logs)
		}

		// Re-annotated with two units: lease db is removed and added anew.
		sd.set(func(f *fakeSystemd) { f.annotated = map[string]string{"db.service": "db", "db-2.service": "db"} })
		d.Reload(ctx)
		time.Sleep(60 * time.Second)
		synctest.Wait()
		if roles, n := bmScrape(t, d); roles["db"] != "leader" || n["db"] != 1 {
			t.Errorf("re-added: role %q, acquisitions %v, want leader and 1 (a new series)\n%s", roles["db"], n["db"], logs)
		}

		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = true })
		store.steal("db", "node-b")
		time.Sleep(10 * time.Second)
		synctest.Wait()
		out := scrapeText(t, d)
		if !strings.Contains(out, `unitlease_lease_stop_failed{lease="db"} 1`) || !strings.Contains(out, `unitlease_lease_role{lease="db",role="none"} 1`) {
			t.Errorf("stolen with a failed stop:\n%s", grepLines(out, `lease="db"`))
		}
		close(stop)
		wg.Wait()
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
		cancel()
	})
}

// TestBreakMetricsAHandoffWhoseStopFailedStaysLeader: a handoff whose
// stop fails keeps the lease held and renewed here: the scrape shows it
// leader, with its token, a deadline that is not 0, a small age and
// stop_failed 1 (the UnitLeaseStopFailed alert; not UnitLeaseNoHolder).
func TestBreakMetricsAHandoffWhoseStopFailedStaysLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, _, d, logs, ctx, _ := lead(t)
		d.UseMetrics()
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = true })
		d.find("db").Handoff(ctx)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		st := d.find("db").Status()
		out := scrapeText(t, d)
		roles, _ := bmScrape(t, d)
		if st.Role != "stop_failed" || !st.Holding || roles["db"] != "leader" ||
			!strings.Contains(out, `unitlease_lease_stop_failed{lease="db"} 1`) ||
			strings.Contains(out, `unitlease_lease_deadline_seconds{lease="db"} 0`+"\n") {
			t.Errorf("status %s holding %v:\n%s\n%s", st.Role, st.Holding, grepLines(out, `lease="db"`), logs)
		}
		sd.set(func(f *fakeSystemd) { f.stuck["db.service"] = false })
	})
}
