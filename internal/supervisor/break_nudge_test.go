package supervisor

// A helper's attempts to break 7269b97 (Nudge skips a supervisor whose
// last snapshot says it holds the lease).

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

// bnObserveStore counts observations.
type bnObserveStore struct {
	*fakeStore
	omu      sync.Mutex
	observes int
}

func (s *bnObserveStore) Observe(ctx context.Context, name string) (policy.Record, error) {
	s.omu.Lock()
	s.observes++
	s.omu.Unlock()
	return s.fakeStore.Observe(ctx, name)
}

func (s *bnObserveStore) count() int {
	s.omu.Lock()
	defer s.omu.Unlock()
	return s.observes
}

// TestBreakNudgeHolderPastItsDeadlineAfterASuspend: a leader whose
// machine slept an hour (its peer took the lease meanwhile) and whose
// resume is not yet noticed (suspendWatch: up to SuspendCheck; or never,
// while the offset cannot be read). The peer's acquisition is published:
// the daemon nudges the lease. Before 7269b97 the nudge's step acted on
// the expired deadline (every step runs expire) and stopped the unit at
// once; at 7269b97 the nudge was dropped and the unit ran on until Wake
// or the renewal timer (retry of running time). Fixed: a holder whose
// wake-up is overdue is nudged.
func TestBreakNudgeHolderPastItsDeadlineAfterASuspend(t *testing.T) {
	bnPastDeadline(t, false)
}

// TestBreakNudgeHolderPastItsDeadlineAfterASuspendStrict: the same,
// asking the nudge to stop the unit at once. Held before 7269b97;
// failed on it (the lost shortcut); holds again.
func TestBreakNudgeHolderPastItsDeadlineAfterASuspendStrict(t *testing.T) {
	bnPastDeadline(t, true)
}

// TestBreakNudgeWakeStillStopsAtOnce: Wake, the daemon's designed path
// after a resume, still stops such a holder with no time passing.
func TestBreakNudgeWakeStillStopsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, units, _ := suspendedLeader(t)
		s.Nudge()
		s.Wake()
		synctest.Wait()
		if running, _, _ := units.state(); running {
			t.Fatal("Wake after the dropped nudge did not stop the unit at once")
		}
	})
}

func bnPastDeadline(t *testing.T, strict bool) {
	synctest.Test(t, func(t *testing.T) {
		s, units, _ := suspendedLeader(t)
		s.Nudge() // the peer's acquisition, published
		synctest.Wait()
		running, _, _ := units.state()
		start := time.Now()
		for running {
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			running, _, _ = units.state()
		}
		// Before 7269b97: d == 0 (the nudge's step expired the deadline).
		// On 7269b97: d is the renewal timer's remaining running time
		// (at most retry); in the daemon, suspendWatch's Wake comes
		// first, within SuspendCheck, the documented bound.
		d := time.Since(start)
		t.Logf("the unit ran on %v of running time after the nudge (retry %v)", d, testTiming.Retry)
		if d > testTiming.Retry {
			t.Errorf("the unit ran on %v of running time after the nudge of the peer's acquisition, an hour past its deadline (retry %v)", d, testTiming.Retry)
		}
		if strict && d > 0 {
			t.Errorf("strict: the nudge did not stop the unit at once (ran on %v)", d)
		}
	})
}

// TestBreakNudgeStaleSnapshotDuringTheLeavingStep: a nudge that comes
// while the step that leaves the lease is under way (its snapshot still
// says holding; here from the Released hook, under the lock) is
// dropped; the step that leaves observes at once anyway, after the
// nudge: nothing waits for a poll.
func TestBreakNudgeStaleSnapshotDuringTheLeavingStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &bnObserveStore{fakeStore: &fakeStore{t: t}}
		units := &fakeUnits{}
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		s := New("demo", []string{"demo.service"}, "node-a", m, store, units, BootClock(), logging.Text(&bytes.Buffer{}, slog.LevelDebug))
		var stale bool
		var observesAtRelease int
		s.SetHooks(hookFuncs{released: func(policy.Record, policy.Cause) {
			stale = s.status.Load().holding
			observesAtRelease = store.count()
			s.Nudge()
		}})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if !s.Holding() {
			t.Fatal("not holding")
		}
		s.Handoff(ctx)
		synctest.Wait() // no time passes
		if !stale {
			t.Fatal("the snapshot was not stale in the leaving step: the test does not test what it says")
		}
		if st := s.Status(); st.Holding {
			t.Fatalf("still holding after the handoff: %+v", st)
		}
		// 7269b97: exactly the leaving step's own observation; before
		// it, the nudge's step added a second, redundant one.
		if got := store.count(); got < observesAtRelease+1 {
			t.Fatalf("observations at once after the leaving step: %d, want at least 1", got-observesAtRelease)
		}
	})
}
