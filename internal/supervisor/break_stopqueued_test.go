package supervisor

// Review tests of the queued stops (b106f64, stopQueued): which stops
// wait in the line and which go to systemd at once, what a supervisor
// does while its startup stop waits, and what the result of a stop that
// waited does once the supervisor ended. Each holds on b106f64.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
)

// bsqUnits is Units and QueuedStops. A queued stop waits in line until
// the test lets it through (next). A Stop (the path of a stop due by a
// deadline) waits for gate if one is set, then: fails without systemd
// taking the stop (queued not called) while untaken > 0; calls queued and
// fails (systemd took the stop, processes are left) while takenFail > 0;
// else calls queued and stops the unit.
type bsqUnits struct {
	mu      sync.Mutex
	running bool
	starts  int
	line    []func(bool, error)
	queued  int // StopQueued calls
	// launching is set by a test around Launch; queuedInLaunch counts
	// the StopQueued calls made while it was set.
	launching      bool
	queuedInLaunch int
	stops          int // Stop calls
	gate           chan struct{}
	untaken        int
	takenFail      int
}

func (u *bsqUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}

func (u *bsqUnits) Start(context.Context, string, Env) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.starts++
	u.running = true
	return nil
}

func (u *bsqUnits) Stop(_ context.Context, unit string, queued func()) (bool, error) {
	u.mu.Lock()
	u.stops++
	gate := u.gate
	u.mu.Unlock()
	if gate != nil {
		<-gate
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.untaken > 0:
		u.untaken--
		return false, errors.New(unit + ": StopUnit: no answer")
	case u.takenFail > 0:
		u.takenFail--
		if queued != nil {
			queued()
		}
		return true, errors.New(unit + ": processes left after SIGKILL")
	}
	if queued != nil {
		queued()
	}
	u.running = false
	return false, nil
}

func (u *bsqUnits) StopQueued(_ context.Context, _ string, done func(bool, error)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.queued++
	if u.launching {
		u.queuedInLaunch++
	}
	u.line = append(u.line, done)
}

// next lets the first queued stop through with err (nil: the unit is
// stopped), on a goroutine of its own as unitctl does.
func (u *bsqUnits) next(t *testing.T, err error) {
	t.Helper()
	u.mu.Lock()
	if len(u.line) == 0 {
		u.mu.Unlock()
		t.Fatal("no queued stop waits")
	}
	done := u.line[0]
	u.line = u.line[1:]
	if err == nil {
		u.running = false
	}
	u.mu.Unlock()
	go done(false, err)
}

// counts: queued stops waiting, StopQueued calls, Stop calls, starts, and
// whether the unit runs.
func (u *bsqUnits) counts() (waiting, queued, stops, starts int, running bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.line), u.queued, u.stops, u.starts, u.running
}

func (u *bsqUnits) set(fn func(u *bsqUnits)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fn(u)
}

func bsqQuiet() *slog.Logger { return logging.Text(io.Discard, slog.LevelDebug) }

// bsqLeading launches a supervisor of demo.service over store and u, lets
// its startup stop through, and returns it leading.
func bsqLeading(t *testing.T, store *fakeStore, u *bsqUnits) (*Supervisor, func()) {
	t.Helper()
	s := demoSupervisor(t, []string{"demo.service"}, store, u, bsqQuiet())
	end := s.Launch(context.WithoutCancel(t.Context()))
	synctest.Wait()
	u.next(t, nil)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if st := s.Status(); st.Role != "leader" || !st.Holding {
		end()
		t.Fatalf("not leading after the startup stop: %+v", st)
	}
	return s, end
}

// Probe (holds): a supervisor ended while its startup stop waits in the
// line. The stop is still carried out (its ctx never ends), and its
// result, success or failure, takes no step: nothing is acquired or
// started, no stop is tried again, and the goroutine that brought it
// ends (synctest.Test fails if a goroutine of the bubble is left
// blocked).
func TestBreakStopQueuedEndedWhileWaiting(t *testing.T) {
	for _, result := range []error{nil, errors.New("processes left")} {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{t: t, noRelease: true}
			u := &bsqUnits{}
			s := demoSupervisor(t, []string{"demo.service"}, store, u, bsqQuiet())
			end := s.Launch(context.WithoutCancel(t.Context()))
			synctest.Wait()
			if waiting, queued, stops, _, _ := u.counts(); waiting != 1 || queued != 1 || stops != 0 {
				t.Fatalf("startup: %d waiting, %d StopQueued, %d Stop calls; want 1, 1, 0", waiting, queued, stops)
			}
			end()
			synctest.Wait()
			u.next(t, result)
			time.Sleep(time.Minute) // stop_wait, the lease span, polls: all would have passed
			synctest.Wait()
			waiting, queued, stops, starts, _ := u.counts()
			if waiting != 0 || queued != 1 || stops != 0 || starts != 0 {
				t.Fatalf("after the result of %v came to the ended supervisor: %d waiting, %d StopQueued, %d Stop, %d starts; want 0, 1, 0, 0",
					result, waiting, queued, stops, starts)
			}
			if h, _ := store.holder(); h != "" {
				t.Fatalf("the ended supervisor acquired: record held by %q", h)
			}
			if st := s.Status(); st.Role != "stopping" || st.Holding {
				t.Fatalf("the ended supervisor took a step: %+v", st)
			}
		})
	}
}

// Probe (holds): a lease of two units never uses the queue: both stops
// go through Stop, and the lease is acquired and both units started.
func TestBreakStopQueuedMultiUnitLeaseNotQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u := &bsqUnits{}
		s := demoSupervisor(t, []string{"a.service", "b.service"}, &fakeStore{t: t, noRelease: true}, u, bsqQuiet())
		defer s.Launch(context.WithoutCancel(t.Context()))()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		_, queued, stops, starts, _ := u.counts()
		if queued != 0 || stops != 2 {
			t.Fatalf("a lease of two units: %d StopQueued, %d Stop calls; want 0 and 2", queued, stops)
		}
		if st := s.Status(); !st.Holding || st.Role != "leader" || starts != 2 {
			t.Fatalf("a lease of two units after its stops: %+v, %d starts", st, starts)
		}
	})
}

// Probe (holds): stops due by a deadline go to Stop at once, never to
// the line, and the watchdog sees them: pending while Stop has not
// returned, late once more than within past their deadline. A handoff
// (Redis cut right after it, so that no renewal moves the deadline on),
// and a renew deadline passed with Redis cut.
func TestBreakStopQueuedDeadlineStopsNotQueued(t *testing.T) {
	const within = 100 * time.Millisecond
	for _, how := range []string{"handoff", "renew deadline"} {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{t: t}
			u := &bsqUnits{}
			s, end := bsqLeading(t, store, u)
			defer end()
			gate := make(chan struct{})
			defer close(gate)
			u.set(func(u *bsqUnits) { u.gate = gate })
			if how == "handoff" {
				s.Handoff(t.Context())
			}
			store.mu.Lock()
			store.cut = true
			store.mu.Unlock()
			var late bool
			for range 100 { // 10 s: past the deadline of either
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				if _, queued, _, _, _ := u.counts(); queued != 1 {
					t.Fatalf("%s: the stop went to the line (%d StopQueued calls)", how, queued)
				}
				late = late || s.StopLate(s.clock(), within)
			}
			_, _, stops, _, _ := u.counts()
			if stops != 1 || !s.StopPending() {
				t.Fatalf("%s: %d Stop calls, pending %t; want the one Stop, pending while systemd does not have it", how, stops, s.StopPending())
			}
			if !late {
				t.Fatalf("%s: a stop due by its deadline, not in systemd's hands 10 s on, never late", how)
			}
		})
	}
}

// Probe (holds): a stop due by a deadline that systemd never took (the
// StopUnit call fails unanswered) stays pending; the stop tried again
// after stop_wait carries no deadline (By zero) but must adopt the
// pending one, so it goes through Stop, not the line, again and again,
// and the stop stays late for the watchdog.
func TestBreakStopQueuedRetryAdoptsAPendingDeadlineStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		u := &bsqUnits{}
		s, end := bsqLeading(t, store, u)
		defer end()
		u.set(func(u *bsqUnits) { u.untaken = 1 << 20 })
		store.steal()   // the next renewal finds the lease lost: a stop due by the deadline
		for range 150 { // 15 s: the stop and several retries, stop_wait apart
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			if _, queued, stops, _, _ := u.counts(); queued != 1 {
				t.Fatalf("a stop tried again while the deadline stop is pending went to the line (%d StopQueued calls after %d Stop calls)", queued, stops)
			}
		}
		_, _, stops, _, running := u.counts()
		if stops < 3 || !running {
			t.Fatalf("%d Stop calls, unit running %t: want the deadline stop and its retries, none taken", stops, running)
		}
		if !s.StopPending() || !s.StopLate(s.clock(), 100*time.Millisecond) {
			t.Fatalf("after %d stops systemd never took: pending %t, late %t; want both", stops, s.StopPending(), s.StopLate(s.clock(), 100*time.Millisecond))
		}
	})
}

// Probe (holds, documents): a stop due by a deadline that systemd took
// and that failed (processes left) is no longer pending; the stop tried
// again after stop_wait has no deadline, so it waits in the line, while
// the unit still runs and the lease is another node's. The policy gives
// no deadline to a retry (Action.By), and the watchdog does not watch it:
// the first stop's, in systemd's hands, was on time. The line only adds
// its wait to a retry that carried no bound before either.
func TestBreakStopQueuedRetryOfATakenFailedStopWaitsInTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		u := &bsqUnits{}
		s, end := bsqLeading(t, store, u)
		defer end()
		u.set(func(u *bsqUnits) { u.takenFail = 1 })
		store.steal()
		time.Sleep(10 * time.Second) // the loss, the failed stop, stop_wait, the retry
		synctest.Wait()
		waiting, queued, stops, _, running := u.counts()
		if stops != 1 || queued != 2 || waiting != 1 || !running {
			t.Fatalf("%d Stop calls, %d StopQueued (%d waiting), running %t; want the deadline stop, then the retry in the line, the unit running",
				stops, queued, waiting, running)
		}
		if s.StopPending() {
			t.Fatal("a stop systemd took is still pending")
		}
		if h, _ := store.holder(); h != "node-b" {
			t.Fatalf("record held by %q", h)
		}
		u.next(t, nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if _, _, _, _, running := u.counts(); running {
			t.Fatal("the retry let through, the unit still runs")
		}
	})
}

// Probe (holds): while the startup stop waits in the line, nothing a
// supervisor is told makes it issue another stop, acquire or start:
// handoff, eligibility, withdrawal, a nudge, a unit failure, and a
// minute of ticks. Once the stop is let through, the lease is acquired
// and the unit started, once.
func TestBreakStopQueuedNothingElseWhileTheStartupStopWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		u := &bsqUnits{}
		s := demoSupervisor(t, []string{"demo.service"}, store, u, bsqQuiet())
		defer s.Launch(context.WithoutCancel(t.Context()))()
		synctest.Wait()
		ctx := t.Context()
		s.Handoff(ctx)
		s.SetEligible(ctx, false)
		s.SetEligible(ctx, true)
		s.SetWithdrawn(ctx, true)
		s.SetWithdrawn(ctx, false)
		s.Nudge()
		s.UnitFailed(ctx)
		time.Sleep(time.Minute)
		synctest.Wait()
		waiting, queued, stops, starts, _ := u.counts()
		if waiting != 1 || queued != 1 || stops != 0 || starts != 0 {
			t.Fatalf("while the startup stop waits: %d waiting, %d StopQueued, %d Stop, %d starts; want 1, 1, 0, 0", waiting, queued, stops, starts)
		}
		if h, _ := store.holder(); h != "" {
			t.Fatalf("acquired while the startup stop waits: held by %q", h)
		}
		if st := s.Status(); st.Role != "stopping" || st.Holding {
			t.Fatalf("while the startup stop waits: %+v", st)
		}
		u.next(t, nil)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		_, queued, stops, starts, running := u.counts()
		if st := s.Status(); st.Role != "leader" || !st.Holding || starts != 1 || !running || queued != 1 || stops != 0 {
			t.Fatalf("after the startup stop: %+v, %d starts, running %t, %d StopQueued, %d Stop", st, starts, running, queued, stops)
		}
	})
}

// Probe (holds, run under -race): 50 leases whose startup stops wait in
// one line, let through in reverse order while every supervisor is
// nudged, handed off and told its eligibility, all at once: each issues
// exactly one stop, through the line, and ends leading its unit, started
// once.
func TestBreakStopQueuedManyLeasesUnderRaces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const leases = 50
		us := make([]*bsqUnits, leases)
		sups := make([]*Supervisor, leases)
		for i := range leases {
			us[i] = &bsqUnits{}
			sups[i] = demoSupervisor(t, []string{"demo.service"}, &fakeStore{t: t, noRelease: true}, us[i], bsqQuiet())
			defer sups[i].Launch(context.WithoutCancel(t.Context()))()
		}
		synctest.Wait()
		var wg sync.WaitGroup
		for i := leases - 1; i >= 0; i-- {
			s := sups[i]
			wg.Go(func() { s.Nudge() })
			wg.Go(func() { s.Handoff(t.Context()) })
			wg.Go(func() { s.SetEligible(t.Context(), false); s.SetEligible(t.Context(), true) })
			us[i].next(t, nil)
		}
		wg.Wait()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for i, s := range sups {
			waiting, queued, stops, starts, running := us[i].counts()
			if st := s.Status(); st.Role != "leader" || !st.Holding || waiting != 0 || queued != 1 || stops != 0 || starts != 1 || !running {
				t.Fatalf("lease %d: %+v; %d waiting, %d StopQueued, %d Stop, %d starts, running %t", i, st, waiting, queued, stops, starts, running)
			}
		}
	})
}
