package supervisor

// Review tests that try to break NudgeVia (a standby's nudged step runs
// where the caller puts it, the daemon's line of nudges), as 601e38e
// wrote it. Two found an overdue supervisor left waiting (behind its own
// step in the line, or in the line as a non-holder); fixed since: an
// overdue supervisor steps at once, with a flag of its own.

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// bnvLine is a line of nudges that nobody works through until the test
// says: the daemon's line while its workers are busy (a resync's
// observations, each waiting on Redis).
type bnvLine struct {
	mu    sync.Mutex
	steps []func()
}

func (l *bnvLine) put(step func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, step)
}

func (l *bnvLine) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.steps)
}

// run runs the steps in line, in order, on the caller's goroutine.
func (l *bnvLine) run() {
	l.mu.Lock()
	steps := l.steps
	l.steps = nil
	l.mu.Unlock()
	for _, f := range steps {
		f()
	}
}

// TestBreakNudgeViaOverdueHolderBehindItsOwnLinedNudge: on 601e38e one
// flag (`nudged`) stood for both kinds of nudge. A standby is nudged and
// its step waits in the line (the line busy); meanwhile the standby
// acquires on its own poll and leads. The machine sleeps an hour (a
// peer took the lease meanwhile) and the resume is not yet noticed; the
// peer's acquisition is published and the lease nudged. NudgeVia sees a
// holder whose wake-up is overdue, which "does not wait in the line: its
// step runs at once on a goroutine of its own", but the CompareAndSwap
// on `nudged` fails (the standby's step is still in line), so no step is
// taken: the unit ran on, an hour past its deadline, until the line
// reached the old step (or Wake, or the renewal timer). Before 601e38e
// the standby's nudge had a goroutine of its own, stepped at once and
// cleared the flag, so the holder's nudge stepped and stopped the unit
// at once; now the overdue nudge has a flag of its own (nudgeNow).
func TestBreakNudgeViaOverdueHolderBehindItsOwnLinedNudge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		store, units, logs, off := &fakeStore{t: t}, &fakeUnits{}, &bytes.Buffer{}, &fakeOffset{}
		s := New("demo", []string{"demo.service"}, "node-a", m, store, units, SuspendClock(off.read), logging.Text(logs, slog.LevelDebug))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		synctest.Wait()
		line := &bnvLine{}
		s.NudgeVia(line.put) // a standby (still stopping at startup): lined
		if line.len() != 1 {
			t.Fatalf("a standby's nudge put %d steps in the line; want 1", line.len())
		}
		time.Sleep(20 * time.Second) // its own polls acquire the lease
		synctest.Wait()
		if running, _, _ := units.state(); !running || !s.Holding() {
			t.Fatalf("not leading after 20s:\n%s", logs)
		}
		store.steal()
		off.suspend(time.Hour)
		if !s.overdue() {
			t.Fatal("the leader is not overdue after the suspend: the test tests nothing")
		}
		s.NudgeVia(line.put) // the peer's acquisition, published
		synctest.Wait()      // no time passes
		running, _, _ := units.state()
		if running {
			t.Errorf("a holder an hour past its deadline (overdue) was nudged and its unit still runs: its nudge was taken for the standby's step still in line (nudged=%t, %d steps in line)", s.nudgePending(), line.len())
		}
		line.run()
		synctest.Wait()
		if running, _, _ := units.state(); running {
			t.Fatalf("the lined step did not stop the unit either:\n%s", logs)
		}
	})
}

// TestBreakNudgeViaFlagClearedOnUnstartedAndEnded (idea 2): a nudge
// before Launch, and one after the end, are lined; their steps are
// refused (not started, ended) and still clear the flag, so a later
// nudge lines a step again. A step taken after the end steps nothing.
func TestBreakNudgeViaFlagClearedOnUnstartedAndEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		u := &bsqUnits{}
		s := demoSupervisor(t, []string{"demo.service"}, store, u, bsqQuiet())
		line := &bnvLine{}
		s.NudgeVia(line.put)
		if line.len() != 1 || !s.nudgePending() {
			t.Fatalf("a nudge before Launch: %d lined, nudged %t", line.len(), s.nudgePending())
		}
		end := s.Launch(context.WithoutCancel(t.Context()))
		synctest.Wait()
		line.run() // after Launch: it steps (a standby stopping at startup)
		if s.nudgePending() {
			t.Fatal("the lined step ran and the flag stays set")
		}
		s.NudgeVia(line.put)
		end()
		line.run() // an ended supervisor's step: refused
		if s.nudgePending() {
			t.Fatal("a lined step of an ended supervisor left the flag set")
		}
		s.NudgeVia(line.put)
		if line.len() != 1 {
			t.Fatalf("a nudge after the end lined %d steps; want 1 (the flag was not stuck)", line.len())
		}
		line.run()
		if s.nudgePending() {
			t.Fatal("flag left set")
		}
		// And before Launch, refused: the flag clears too.
		s2 := demoSupervisor(t, []string{"demo.service"}, store, &bsqUnits{}, bsqQuiet())
		s2.NudgeVia(line.put)
		line.run()
		if s2.nudgePending() {
			t.Fatal("a lined step refused before Launch left the flag set")
		}
		s2.NudgeVia(line.put)
		if line.len() != 1 {
			t.Fatal("a nudge after a refused step lined nothing")
		}
		line.run()
		if _, _, stops, starts, _ := u.counts(); starts != 0 || stops != 0 {
			t.Fatalf("after the end: %d starts, %d stops", starts, stops)
		}
	})
}

// bnvUnits is Units (not queued) whose starts wait for gate.
type bnvUnits struct {
	mu      sync.Mutex
	gate    chan struct{}
	starts  int
	running map[string]bool
}

func (u *bnvUnits) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}

func (u *bnvUnits) Start(_ context.Context, unit string, _ Env) error {
	u.mu.Lock()
	u.starts++
	gate := u.gate
	u.mu.Unlock()
	if gate != nil {
		<-gate
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.running[unit] = true
	return nil
}

func (u *bnvUnits) Stop(_ context.Context, unit string, queued func()) (bool, error) {
	if queued != nil {
		queued()
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	u.running[unit] = false
	return false, nil
}

func (u *bnvUnits) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.starts
}

// TestBreakNudgeViaLinedStepDoesNotCarryTheStart (idea 1): what a line
// worker carries for a standby that a release nudged: the observation,
// the acquisition, and then the start, which never runs on the worker (a
// start that waits for systemd would hold a worker, and with eight of
// them the whole line). With plain Units of one unit, and of two units,
// the worker returns while the start still waits.
func TestBreakNudgeViaLinedStepDoesNotCarryTheStart(t *testing.T) {
	for _, names := range [][]string{{"demo.service"}, {"demo.service", "side.service"}} {
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := &fakeStore{t: t, noRelease: true}
				peer := policy.Record{Holder: "node-b", Version: 4, Token: strings.Repeat("b", 32)}
				store.set(redislease.Encode(peer))
				gate := make(chan struct{})
				u := &bnvUnits{gate: gate, running: map[string]bool{}}
				s := demoSupervisor(t, names, store, u, bsqQuiet())
				end := s.Launch(context.WithoutCancel(t.Context()))
				defer end()
				time.Sleep(5 * time.Second) // the startup stop, and a few polls of node-b's record
				synctest.Wait()
				if st := s.Status(); st.Role != "standby" || st.Holder != "node-b" {
					t.Fatalf("not a standby of node-b's record: %+v", st)
				}
				rel := peer
				rel.Version++
				rel.Released = true
				store.set(redislease.Encode(rel)) // node-b released, and published it
				line := &bnvLine{}
				s.NudgeVia(line.put)
				if line.len() != 1 {
					t.Fatalf("the nudge lined %d steps", line.len())
				}
				done := make(chan struct{})
				go func() { // a line worker
					line.run()
					close(done)
				}()
				synctest.Wait() // no time passes
				select {
				case <-done:
				default:
					t.Fatalf("the line worker is still busy with the nudged step (status %+v, %d starts waiting)", s.Status(), u.count())
				}
				if st := s.Status(); !st.Holding || u.count() == 0 {
					t.Fatalf("the nudged step did not acquire and begin the start: %+v, %d starts", st, u.count())
				}
				close(gate)
				synctest.Wait()
				if st := s.Status(); st.Role != "leader" {
					t.Fatalf("not leading once the start got through: %+v", st)
				}
			})
		})
	}
}

// TestBreakNudgeViaRacesWithLaunchEndAndSteps (ideas 2 and 5): nudges
// from many goroutines through a line of eight workers, while the
// supervisor is launched, acquires, loses its lease, and ends, under
// -race. Once every nudge returned and the line is worked through, the
// flag is clear: no nudge is left stuck.
func TestBreakNudgeViaRacesWithLaunchEndAndSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t}
		s := demoSupervisor(t, []string{"demo.service"}, store, &fakeUnits{}, bsqQuiet())
		work := make(chan func(), 1024)
		var workers sync.WaitGroup
		for range 8 {
			workers.Go(func() {
				for f := range work {
					f()
				}
			})
		}
		put := func(step func()) { work <- step }
		var nudgers sync.WaitGroup
		for range 16 {
			nudgers.Go(func() {
				for range 1000 {
					s.NudgeVia(put)
					time.Sleep(37 * time.Millisecond)
				}
			})
		}
		end := s.Launch(context.WithoutCancel(t.Context()))
		time.Sleep(20 * time.Second)
		if !s.Holding() {
			t.Error("not holding after 20s: the test does not cover a holder")
		}
		store.steal() // lost: it stops, and stands by
		time.Sleep(2 * time.Second)
		if s.Holding() {
			t.Error("still holding 2s after the lease was taken")
		}
		time.Sleep(10 * time.Second) // node-b's record ages out: acquired again
		end()
		nudgers.Wait()
		close(work)
		workers.Wait()
		if s.nudgePending() {
			t.Fatal("every nudge returned and every lined step ran, and the flag is still set: nudges of this supervisor are dropped from now on")
		}
	})
}

// TestBreakNudgeViaOverdueStopFailedNonHolderWaitsInLine (idea 4, other
// overdue supervisors): a leader loses its lease (a peer took it) and
// its stop fails (processes left after SIGKILL): stop_failed, not
// holding, its unit still running, its stop tried again every stop_wait.
// The machine sleeps an hour; before the resume is noticed, the lease
// is nudged. The supervisor is not a holder, so its step waits in the
// line and the stop was not tried again until the line reached it (or
// Wake), on 601e38e; Nudge tried it again at once. Now any overdue
// supervisor steps at once: the unit runs here without a lease.
func TestBreakNudgeViaOverdueStopFailedNonHolderWaitsInLine(t *testing.T) {
	for _, via := range []string{"Nudge", "NudgeVia"} {
		t.Run(via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
				if err != nil {
					t.Fatal(err)
				}
				store, u, off := &fakeStore{t: t, noRelease: true}, &bsqUnits{}, &fakeOffset{}
				logs := &bytes.Buffer{}
				s := New("demo", []string{"demo.service"}, "node-a", m, store, u, SuspendClock(off.read), logging.Text(logs, slog.LevelDebug))
				end := s.Launch(context.WithoutCancel(t.Context()))
				defer end()
				synctest.Wait()
				u.next(t, nil) // the startup stop
				time.Sleep(30 * time.Second)
				synctest.Wait()
				if !s.Holding() {
					t.Fatalf("not leading:\n%s", logs)
				}
				u.set(func(u *bsqUnits) { u.takenFail = 1 << 20 }) // every stop fails
				store.steal()
				time.Sleep(1500 * time.Millisecond) // the renewal finds it lost: stop, which fails
				synctest.Wait()
				if st := s.Status(); st.Role != "stop_failed" || st.Holding {
					t.Fatalf("want stop_failed, not holding: %+v\n%s", st, logs)
				}
				off.suspend(time.Hour)
				if !s.overdue() {
					t.Fatal("not overdue after the suspend")
				}
				_, queuedBefore, stopsBefore, _, _ := u.counts()
				line := &bnvLine{}
				if via == "Nudge" {
					s.Nudge()
				} else {
					s.NudgeVia(line.put)
				}
				synctest.Wait() // no time passes
				_, queued, stops, _, running := u.counts()
				if queued+stops == queuedBefore+stopsBefore {
					t.Errorf("%s of an overdue stop_failed non-holder (unit running %t, a peer holds the lease): the stop was not tried again at once (%d steps lined)", via, running, line.len())
				}
				line.run()
			})
		})
	}
}
