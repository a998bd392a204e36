package supervisor

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// slowRenewals answers each renewal after renewTook on the bubble's clock.
type slowRenewals struct {
	*fakeStore
	renewTook time.Duration
}

func (s slowRenewals) Renew(ctx context.Context, name string, held policy.Record) (policy.Record, error) {
	time.Sleep(s.renewTook)
	return s.fakeStore.Renew(ctx, name, held)
}

// recordingMeter keeps what it is told.
type recordingMeter struct {
	mu      sync.Mutex
	renews  []time.Duration
	kinds   []policy.EventKind
	journal []policy.Journal
	causes  []policy.Cause
	garbage int
}

func (r *recordingMeter) Answered(a policy.ActionKind, ev policy.Event, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kinds = append(r.kinds, ev.Kind)
	if a == policy.Renew {
		r.renews = append(r.renews, took)
	}
}

func (r *recordingMeter) Journaled(j policy.Journal, c policy.Cause) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.journal, r.causes = append(r.journal, j), append(r.causes, c)
}

func (r *recordingMeter) Garbage() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.garbage++
}

// TestMeterTakesEachRenewalsTimeOnTheSupervisorsClock: the meter is told
// of every renewal with the time it took on the supervisor's clock, and
// of the journal's events with the cause of the stop.
func TestMeterTakesEachRenewalsTimeOnTheSupervisorsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		meter := &recordingMeter{}
		s := New("demo", []string{"demo.service"}, "node-a", m, slowRenewals{store, 3 * time.Millisecond}, &fakeUnits{}, BootClock(), logging.Text(&bytes.Buffer{}, slog.LevelDebug))
		s.SetMeter(meter)
		ctx, cancel := context.WithCancel(t.Context())
		s.Start(ctx)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		store.steal()
		time.Sleep(1500 * time.Millisecond) // the next renewal finds it
		synctest.Wait()
		cancel()
		<-s.Done()
		meter.mu.Lock()
		defer meter.mu.Unlock()
		if len(meter.renews) < 5 {
			t.Fatalf("%d renewals metered in 10 s at retry 1 s", len(meter.renews))
		}
		for i, took := range meter.renews {
			if took != 3*time.Millisecond {
				t.Errorf("renewal %d took %v on the supervisor's clock, want 3ms", i, took)
			}
		}
		if !slices.Contains(meter.kinds, policy.RenewLost) || !slices.Contains(meter.kinds, policy.AcquireOK) || !slices.Contains(meter.kinds, policy.Observed) {
			t.Errorf("answers metered: %v", meter.kinds)
		}
		i := slices.Index(meter.journal, policy.JournalLost)
		if i < 0 || meter.causes[i] != policy.CauseLost {
			t.Fatalf("journal metered %v with causes %v: want lost, with cause lost", meter.journal, meter.causes)
		}
		if !slices.Contains(meter.journal, policy.JournalAcquired) || !slices.Contains(meter.journal, policy.JournalStarted) {
			t.Errorf("journal metered %v", meter.journal)
		}
		if meter.garbage != 0 {
			t.Errorf("garbage metered %d times", meter.garbage)
		}
	})
}

// TestMeterCountsGarbageOncePerValue: as the journal reports it.
func TestMeterCountsGarbageOncePerValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		store.set("not a record")
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		meter := &recordingMeter{}
		s := New("demo", []string{"demo.service"}, "node-a", m, store, &fakeUnits{}, BootClock(), logging.Text(&bytes.Buffer{}, slog.LevelDebug))
		s.SetMeter(meter)
		ctx, cancel := context.WithCancel(t.Context())
		s.Start(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		store.set("another non-record")
		time.Sleep(30 * time.Second)
		synctest.Wait()
		cancel()
		<-s.Done()
		meter.mu.Lock()
		defer meter.mu.Unlock()
		if meter.garbage != 2 {
			t.Fatalf("garbage metered %d times for two values, want 2", meter.garbage)
		}
	})
}
