package supervisor

// Adversarial review of SetEligibleSoon: the flag a supervisor's next
// deliver steps into the machine first (flushEligibility).

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// gatedStops is fakeUnits whose stops wait for gate to close.
type gatedStops struct {
	*fakeUnits
	gate chan struct{}
}

func (g *gatedStops) Stop(ctx context.Context, unit string, queued func()) (bool, error) {
	<-g.gate
	return g.fakeUnits.Stop(ctx, unit, queued)
}

// superviseIneligible runs a supervisor whose machine starts ineligible.
func superviseIneligible(t *testing.T, store *fakeStore, u Units, logs *bytes.Buffer) (*Supervisor, policy.Timing) {
	t.Helper()
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7, Ineligible: true})
	if err != nil {
		t.Fatal(err)
	}
	s := New("demo", []string{"demo.service"}, "node-a", m, store, u, BootClock(), logging.Text(logs, slog.LevelDebug))
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	s.Start(ctx)
	return s, tm
}

// TestBreakEligibleSoonOrder: an ineligible supervisor that aged the
// missing key past the lease span never acquires; SetEligibleSoon(true)
// makes it acquire within a poll (and the confirm wait), not a span;
// SetEligibleSoon(true) followed by SetEligible(false), or by
// SetEligibleSoon(false), before any step keeps it out for good.
func TestBreakEligibleSoonOrder(t *testing.T) {
	for _, c := range []struct {
		name  string
		after func(ctx context.Context, s *Supervisor)
		want  bool // acquires
	}{
		{"soon", func(context.Context, *Supervisor) {}, true},
		{"soon then SetEligible(false)", func(ctx context.Context, s *Supervisor) { s.SetEligible(ctx, false) }, false},
		{"soon then soon(false)", func(_ context.Context, s *Supervisor) { s.SetEligibleSoon(false) }, false},
		{"soon, SetEligible(false), SetEligible(true)", func(ctx context.Context, s *Supervisor) {
			s.SetEligible(ctx, false)
			s.SetEligible(ctx, true)
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store, units, logs := &fakeStore{t: t, noRelease: true}, &fakeUnits{}, &bytes.Buffer{}
				s, tm := superviseIneligible(t, store, units, logs)
				time.Sleep(3 * tm.CrashBound())
				synctest.Wait()
				if h, _ := store.holder(); h != "" || s.Status().Holding {
					t.Fatalf("an ineligible supervisor acquired:\n%s", logs)
				}
				s.SetEligibleSoon(true)
				c.after(t.Context(), s)
				time.Sleep(tm.PollMax + tm.ConfirmWait() + 2*tm.ReplyMax)
				synctest.Wait()
				running, starts, _ := units.state()
				h, _ := store.holder()
				if got := h == "node-a" && running && starts == 1; got != c.want {
					t.Fatalf("holder %q, running %t, %d starts: want acquired %t\n%s", h, running, starts, c.want, logs)
				}
				if c.want {
					return
				}
				time.Sleep(5 * tm.CrashBound())
				synctest.Wait()
				if h, _ := store.holder(); h != "" || starts != 0 {
					t.Fatalf("acquired later though the last word was ineligible:\n%s", logs)
				}
			})
		})
	}
}

// TestBreakEligibleSoonDuringAHungStartupStop: the startup stop (whose
// result comes back on carry's step, not on a deliver) outlasts a lease
// span while SetEligibleSoon(true) waits: nothing was observed during
// the stop, so the span is aged from the first observation after it
// (no acquisition before), and the flag is taken by a later tick (the
// supervisor acquires, it is not stuck ineligible).
func TestBreakEligibleSoonDuringAHungStartupStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		store, logs := &fakeStore{t: t, noRelease: true}, &bytes.Buffer{}
		units := &gatedStops{fakeUnits: &fakeUnits{running: true}, gate: gate}
		s, tm := superviseIneligible(t, store, units, logs)
		synctest.Wait()
		s.SetEligibleSoon(true)
		time.Sleep(3 * tm.CrashBound())
		synctest.Wait()
		close(gate)
		synctest.Wait()
		if running, _, stops := units.state(); running || stops != 1 {
			t.Fatalf("startup stop not through: running %t, %d stops", running, stops)
		}
		time.Sleep(tm.LeaseSpan - tm.PollMax)
		synctest.Wait()
		if h, _ := store.holder(); h != "" {
			t.Fatalf("acquired within a lease span of the first observation:\n%s", logs)
		}
		time.Sleep(2*tm.PollMax + tm.ConfirmWait() + 2*tm.ReplyMax)
		synctest.Wait()
		if h, _ := store.holder(); h != "node-a" || !func() bool { r, _, _ := units.state(); return r }() {
			t.Fatalf("not leading after the span (holder %q): the eligibility was never taken\n%s", h, logs)
		}
	})
}

// TestBreakEligibleSoonRacingSetEligible: SetEligibleSoon and
// SetEligible from several goroutines while the timer steps (run under
// -race); once they are done, a last SetEligible(false) keeps the node
// out: whatever it held is handed off and nothing is acquired again.
func TestBreakEligibleSoonRacingSetEligible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units, logs := &fakeStore{t: t}, &fakeUnits{}, &bytes.Buffer{}
		s, tm := superviseIneligible(t, store, units, logs)
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 50 {
					if (i+g)%2 == 0 {
						s.SetEligibleSoon(i%3 != 0)
					} else {
						s.SetEligible(t.Context(), i%3 == 0)
					}
					time.Sleep(tm.PollMin / 3)
				}
			})
		}
		wg.Wait()
		s.SetEligible(t.Context(), true)
		s.SetEligibleSoon(false)
		time.Sleep(tm.CrashBound() + tm.StopWait)
		synctest.Wait()
		before, _, _ := units.state()
		_, starts0, _ := units.state()
		time.Sleep(5 * tm.CrashBound())
		synctest.Wait()
		running, starts, _ := units.state()
		if before || running || starts != starts0 || s.Status().Holding {
			t.Fatalf("running %t (before %t), starts %d -> %d, holding %t after the last word said ineligible\n%s",
				running, before, starts0, starts, s.Status().Holding, logs)
		}
	})
}
