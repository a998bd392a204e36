package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
)

// stopLine is fakeUnits whose queued stops wait in a line until the test
// lets them through (next); a blocking Stop parks until gate is closed,
// so that a supervisor that did not queue its stop parks a goroutine for
// it.
type stopLine struct {
	fakeUnits
	mu      sync.Mutex
	line    []func(bool, error)
	gate    chan struct{}
	blocked int // Stop calls
}

func newStopLine() *stopLine { return &stopLine{gate: make(chan struct{})} }

func (u *stopLine) StopQueued(_ context.Context, _ string, done func(bool, error)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.line = append(u.line, done)
}

func (u *stopLine) Stop(ctx context.Context, unit string, queued func()) (bool, error) {
	u.mu.Lock()
	u.blocked++
	u.mu.Unlock()
	<-u.gate
	return u.fakeUnits.Stop(ctx, unit, queued)
}

// next lets the first stop in the line through with err (nil: the unit
// is stopped), on a goroutine of its own as unitctl does.
func (u *stopLine) next(err error) {
	u.mu.Lock()
	done := u.line[0]
	u.line = u.line[1:]
	u.mu.Unlock()
	if err == nil {
		_, _ = u.fakeUnits.Stop(context.Background(), "", nil)
	}
	go done(false, err)
}

func (u *stopLine) counts() (waiting, blocked int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.line), u.blocked
}

// TestStartupStopsParkNoGoroutine: 300 supervisors of one unit each, whose
// startup stops (rule 6: no deadline) wait their turn, hold no goroutine
// for them while they wait. Once let through, every lease is acquired
// and its unit started.
func TestStartupStopsParkNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const leases = 300
		u := newStopLine()
		defer close(u.gate)
		log := logging.Text(io.Discard, slog.LevelInfo)
		base := runtime.NumGoroutine()
		sups := make([]*Supervisor, leases)
		for i := range leases {
			m := demoSupervisor(t, []string{fmt.Sprintf("u%d.service", i)}, &fakeStore{t: t, noRelease: true}, u, log)
			m.Lease = fmt.Sprintf("l%d", i)
			sups[i] = m
			defer m.Launch(context.WithoutCancel(t.Context()))()
		}
		synctest.Wait()
		if extra := runtime.NumGoroutine() - base; extra >= leases/10 {
			t.Fatalf("%d goroutines more than before the %d leases, their startup stops waiting", extra, leases)
		}
		if waiting, blocked := u.counts(); waiting != leases || blocked != 0 {
			t.Fatalf("%d stops in the line and %d blocking, want %d and none", waiting, blocked, leases)
		}
		for range leases {
			u.next(nil)
		}
		time.Sleep(10 * time.Second) // the lease span and the confirm wait of testTiming
		synctest.Wait()
		for _, s := range sups {
			if st := s.Status(); st.Role != "leader" || !st.Holding {
				t.Fatalf("lease %s after its startup stop: %+v", s.Lease, st)
			}
		}
		if _, starts, _ := u.state(); starts != leases {
			t.Fatalf("%d starts, want %d", starts, leases)
		}
	})
}

// TestStopDueByADeadlineIsNotQueued: a holder that loses its lease stops
// at once (Stop), never behind the line: that stop is due by the
// deadline. A startup stop that fails is journalled stop_failed, and the
// lease is neither acquired nor left until a stop succeeds.
func TestStopDueByADeadlineIsNotQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := newStopLine()
		close(u.gate) // Stop goes through
		store := &fakeStore{t: t, noRelease: true}
		s := demoSupervisor(t, []string{"demo.service"}, store, u, logging.Text(io.Discard, slog.LevelDebug))
		defer s.Launch(context.WithoutCancel(t.Context()))()
		synctest.Wait()
		u.next(nil)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if st := s.Status(); !st.Holding {
			t.Fatalf("not holding after the startup stop: %+v", st)
		}
		store.steal()
		time.Sleep(1500 * time.Millisecond) // the next renewal finds it lost: the stop
		synctest.Wait()
		if waiting, blocked := u.counts(); waiting != 0 || blocked != 1 {
			t.Fatalf("the lost lease's stop: %d in the line, %d Stop calls; want none and one", waiting, blocked)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		u := newStopLine()
		defer close(u.gate)
		logs := &syncBuffer{}
		s := demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, u, logging.Text(logs, slog.LevelDebug))
		defer s.Launch(context.WithoutCancel(t.Context()))()
		synctest.Wait()
		u.next(errors.New("processes left"))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=stop_failed") {
			t.Fatalf("a failed queued stop is not journalled stop_failed:\n%s", logs)
		}
		if st := s.Status(); st.Holding {
			t.Fatalf("acquired after its startup stop failed: %+v", st)
		}
		// Tried again after stop_wait, through the line again: no
		// deadline bounds it either.
		if waiting, _ := u.counts(); waiting != 1 {
			t.Fatalf("%d stops in the line after the failed one, want the retry", waiting)
		}
	})
}
