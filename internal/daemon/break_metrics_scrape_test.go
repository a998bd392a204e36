package daemon

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/metrics"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// bmUnreachable is a memStore whose Redis does not answer the scrape's
// probes: each waits reply_max and fails, as redislease's Ping and
// Durability do against a Redis that drops packets (each is bounded by
// reply_max, and Durability's INFO fails first).
type bmUnreachable struct {
	*memStore
	replyMax time.Duration
}

func (u bmUnreachable) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, u.replyMax)
	defer cancel()
	<-ctx.Done()
	return ctx.Err()
}

func (u bmUnreachable) Ping(ctx context.Context) error { return u.wait(ctx) }

func (u bmUnreachable) Durability(ctx context.Context) redislease.Durability {
	_ = u.wait(ctx)
	return redislease.Durability{CanLoseAcked: true}
}

// TestBreakMetricsScrapeOfAnUnreachableRedisFitsItsTimeout: with a valid
// reply_max of 6 s (below retry 10 s and renew_deadline 30 s), a Redis
// that does not answer once made the scrape wait reply_max for the PING
// and reply_max again for the durability read: 12 s, past the endpoint's
// fixed 10 s timeout. The scrape was answered 503, so redis_up 0 (the
// UnitLeaseRedisDown alert) and every lease's series were missing exactly
// while Redis was out of reach. The probes now run at once, and the
// timeout covers reply_max.
func TestBreakMetricsScrapeOfAnUnreachableRedisFitsItsTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tm, err := policy.Timing{Retry: 10 * time.Second, RenewDeadline: 30 * time.Second, StopWait: 5 * time.Second,
			ReplyMax: 6 * time.Second, PollMin: 5 * time.Second, PollMax: 10 * time.Second, Allowance: time.Second}.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		store := bmUnreachable{newMemStore(), tm.ReplyMax}
		sd := newFakeSystemd(map[string]string{"db.service": "db"})
		d := New(&config.Config{Node: "node-a", Timing: tm}, logging.Text(&syncBuffer{}, slog.LevelInfo), store, sd, unitctl.Config{}, func(string) {})
		h := d.UseMetrics().Handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, metrics.Path, nil))
		body := rec.Body.String()
		time.Sleep(time.Minute) // the timed-out gather finishes in the background
		synctest.Wait()
		if rec.Code != http.StatusOK || !strings.Contains(body, "unitlease_redis_up 0\n") {
			t.Fatalf("scrape with Redis unreachable (reply_max %v, timeout %v): %d, redis_up 0 served: %v\n%.300s",
				tm.ReplyMax, scrapeTimeout(tm.ReplyMax), rec.Code, strings.Contains(body, "unitlease_redis_up 0\n"), body)
		}
	})
}
