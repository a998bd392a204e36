package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/metrics"
)

// UseMetrics makes the daemon count for a Prometheus endpoint and
// returns the registry's handler; before the first reload.
func (d *Daemon) UseMetrics() *metrics.Metrics {
	t := d.cfg.Timing
	d.metrics = metrics.New(metricsSource{d}, metrics.Options{Version: Version, LeaseSpan: t.LeaseSpan, CrashBound: t.CrashBound()})
	return d.metrics
}

// serveMetrics binds the endpoint [metrics] configures and serves it
// until ctx ends. An address it cannot bind stops the daemon before it
// starts; a failure while it serves is journalled, and the leases go on
// without the endpoint.
func (d *Daemon) serveMetrics(ctx context.Context, mc config.Metrics) error {
	l, err := metrics.Listen(mc.Listen)
	if err != nil {
		return fmt.Errorf("metrics.listen %s: %w", mc.Listen, err)
	}
	h := d.UseMetrics().Handler()
	log := d.log.With(logging.Event, "metrics")
	go func() {
		if err := metrics.Serve(ctx, l, h, scrapeTimeout(d.cfg.Timing.ReplyMax), log); err != nil {
			d.log.Error("metrics endpoint: "+err.Error()+"; leases go on without it", logging.Event, "metrics_error")
		}
	}()
	return nil
}

// scrapeTimeout bounds a scrape: the leases' states are in memory, and
// Redis's answers to its two probes, asked at once, come within
// reply_max; 10 s at least, Prometheus's default scrape timeout.
func scrapeTimeout(replyMax time.Duration) time.Duration {
	return max(10*time.Second, replyMax+2*time.Second)
}

// metricsSource is what a scrape reads of the daemon.
type metricsSource struct{ d *Daemon }

func (s metricsSource) Leases() []metrics.LeaseView {
	d := s.d
	now := d.clock()
	rs := d.running() // in no order: the registry sorts what it serves
	views := make([]metrics.LeaseView, 0, len(rs))
	for _, r := range rs {
		sup := r.sup
		st := sup.Status()
		since := max(0, now.Sub(st.At)) // the status is as of its step
		disabled := d.isDisabled(sup.Lease)
		stopFailed := st.Role == "stop_failed"
		views = append(views, metrics.LeaseView{
			Lease: sup.Lease, Units: sup.Units,
			Holding:    st.Holding,
			Competing:  !st.Holding && !stopFailed && !sup.Withdrawn() && !sup.Ineligible() && !disabled,
			StopFailed: stopFailed, Disabled: disabled,
			Token:        st.Token,
			Age:          st.LeaseAge + since,
			DeadlineLeft: max(0, st.DeadlineLeft-since),
		})
	}
	return views
}

func (s metricsSource) Drained() bool { return s.d.drained.Load() }

func (s metricsSource) RedisUp(ctx context.Context) bool { return s.d.store.Ping(ctx) == nil }

func (s metricsSource) RedisDurable(ctx context.Context) bool {
	return !s.d.store.Durability(ctx).CanLoseAcked
}
