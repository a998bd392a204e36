package supervisor

import (
	"bytes"
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// slowStops is fakeUnits whose stops, once hung, return only when
// released; with queue set a stop tells first that systemd has it (the
// job is queued, the unit is slow to stop), without it the call that
// would queue the job hangs (systemd does not answer).
type slowStops struct {
	*fakeUnits
	hang, queue atomic.Bool
	entered     atomic.Int32 // hung stops
	release     chan struct{}
}

func (h *slowStops) Stop(ctx context.Context, unit string, queued func()) (bool, error) {
	if h.hang.Load() {
		h.entered.Add(1)
		if h.queue.Load() && queued != nil {
			queued()
		}
		<-h.release
	}
	return h.fakeUnits.Stop(ctx, unit, queued)
}

// TestAStopSystemdDoesNotTakeIsLate: the leader, cut off from Redis, stops
// its unit at the deadline; a stop that systemd has not taken more than
// the check after the deadline is late (the watchdog withholds its ping),
// one that systemd took is not, however long the unit takes to stop (its
// stop timeouts bound it, even if the daemon dies). Once the stop returns,
// nothing is late.
func TestAStopSystemdDoesNotTakeIsLate(t *testing.T) {
	for _, queue := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{t: t, noRelease: true}
			units := &slowStops{fakeUnits: &fakeUnits{}, release: make(chan struct{})}
			units.queue.Store(queue)
			m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			clock := BootClock()
			s := New("demo", []string{"demo.service"}, "node-a", m, store, units, clock, logging.Text(&bytes.Buffer{}, slog.LevelInfo))
			ctx, cancel := context.WithCancel(t.Context())
			released := false
			defer func() {
				if !released {
					close(units.release)
				}
				cancel()
			}()
			s.Start(ctx)
			time.Sleep(30 * time.Second)
			synctest.Wait()
			if running, _, _ := units.state(); !running {
				t.Fatal("not leading after 30s")
			}
			if p := s.stopping.Load(); p != nil || s.StopLate(clock(), 0) {
				t.Fatalf("leading, a stop is pending (%+v)", p)
			}
			units.hang.Store(true)
			store.mu.Lock()
			store.cut = true
			store.mu.Unlock()
			time.Sleep(testTiming.Retry + testTiming.RenewDeadline + time.Second)
			synctest.Wait()
			if units.entered.Load() != 1 {
				t.Fatalf("%d stops a second past the longest deadline, want 1", units.entered.Load())
			}
			const within = 100 * time.Millisecond
			p := s.stopping.Load()
			switch {
			case queue && (p != nil || s.StopLate(clock(), within)):
				t.Fatalf("systemd took the stop, yet it is pending (%+v) or late (%t)", p, s.StopLate(clock(), within))
			case !queue && p == nil:
				t.Fatal("systemd did not take the stop, and none is pending")
			case !queue:
				if s.StopLate(policy.Instant(p.by.Load()).Add(within), within) || !s.StopLate(policy.Instant(p.by.Load()).Add(within+time.Nanosecond), within) {
					t.Fatalf("a stop due by %v not taken: late at %v %t, at %v %t; want late only past the check",
						policy.Instant(p.by.Load()), policy.Instant(p.by.Load()).Add(within), s.StopLate(policy.Instant(p.by.Load()).Add(within), within), policy.Instant(p.by.Load()).Add(within+1), s.StopLate(policy.Instant(p.by.Load()).Add(within+1), within))
				}
				if !s.Stuck(clock(), within) {
					t.Fatal("a stop not taken a second past its deadline does not make the loop stuck")
				}
			}
			close(units.release)
			released = true
			synctest.Wait()
			if running, _, _ := units.state(); running || s.StopLate(clock(), within) || s.stopping.Load() != nil {
				t.Fatalf("the stop returned: unit running %t, stop late %t", running, s.StopLate(clock(), within))
			}
		})
	}
}
