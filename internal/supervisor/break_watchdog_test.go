package supervisor

// Adversarial review of the kill allowance (commit 60adadc): probes of
// what the watchdog reads of a loop (Busy, Overdue) and of Wake. Each
// passes: it documents a step of the argument that held.

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

// jumpClock is a SuspendClock whose suspended time the test sets: the
// runtime's timers do not count it, as after a resume.
type jumpClock struct {
	mu    sync.Mutex
	slept time.Duration
}

func (j *jumpClock) read() (Offset, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return Offset{Lo: j.slept, Hi: j.slept}, nil
}

func (j *jumpClock) jump(d time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.slept += d
}

// Probe (holds): overdue, woken, stepped, overdue again, many times over
// (a runtime whose timers keep falling behind the clock): each time the
// loop is overdue by more than the check until woken, and one Wake makes
// it step and clears it; the first jump past the deadline stops the unit
// at that Wake. No cycle leaves the loop acting late without the watchdog
// seeing it overdue.
func TestBreakOverdueWokenSteppedRepeatedly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units := &fakeStore{t: t, noRelease: true}, &fakeUnits{}
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		jc := &jumpClock{}
		clock := SuspendClock(jc.read)
		s := New("demo", []string{"demo.service"}, "node-a", m, store, units, clock, logging.Text(&bytes.Buffer{}, slog.LevelInfo))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if running, _, _ := units.state(); !running {
			t.Fatal("not leading after 30s")
		}
		const within = 200 * time.Millisecond
		for i := range 20 {
			due := policy.Instant(s.due.Load() - 1)
			// Past the next wake-up (a renewal), by more than the check.
			jc.jump(due.Sub(clock()) + 300*time.Millisecond)
			if !s.Overdue(clock(), within) {
				t.Fatalf("cycle %d: the wake-up passed %v ago on the clock, not overdue", i, 300*time.Millisecond)
			}
			s.Wake()
			synctest.Wait()
			if s.Stuck(clock(), within) {
				t.Fatalf("cycle %d: still overdue after Wake", i)
			}
		}
		if running, _, _ := units.state(); !running || !s.Holding() {
			t.Fatal("renewals taken late but within the deadline lost the lease")
		}
		store.mu.Lock()
		store.cut = true // Redis unreachable: no renewal succeeds any more
		store.mu.Unlock()
		jc.jump(testTiming.Retry + testTiming.RenewDeadline + time.Second)
		if !s.Overdue(clock(), within) {
			t.Fatal("past the deadline on the clock, not overdue")
		}
		s.Wake()
		synctest.Wait()
		if running, _, _ := units.state(); running {
			t.Fatalf("woken past its deadline, the leader still runs the unit (%s)", s.Status().Role)
		}
	})
}

// Probe (holds, and says what the daemon must keep): a supervisor whose
// ctx ended is neither busy nor overdue, whatever it holds: once ended it
// is invisible to the watchdog. The daemon ends a supervisor only once it
// no longer holds its lease (remove, Shutdown wait on Holding), so no
// unit runs under an ended loop; this pins that ending one that holds
// would leave its unit to no deadline at all.
func TestBreakEndedSupervisorIsInvisibleToTheWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store, units := &fakeStore{t: t, noRelease: true}, &fakeUnits{}
		s, cancel := supervise(t, store, units, logging.Text(&bytes.Buffer{}, slog.LevelInfo))
		time.Sleep(30 * time.Second)
		synctest.Wait()
		cancel()
		<-s.Done()
		time.Sleep(time.Hour)
		synctest.Wait()
		now := BootClock()() + policy.Instant(time.Hour)
		running, _, _ := units.state()
		if s.Stuck(now, time.Millisecond) || !running || !s.Holding() {
			t.Fatalf("ended: stuck %t, unit running %t, holding %t", s.Stuck(now, time.Millisecond), running, s.Holding())
		}
	})
}
