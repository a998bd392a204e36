package supervisor

// Adversarial review of commit 267da82 (a stop the lease forced must be in
// systemd's hands by its deadline, or the watchdog withholds its ping):
// probes of the supervisor's pendingStop. Each passes: it documents a
// step of the argument that held. The ones that fail are in
// break_stoplate_open_test.go, behind the breaks tag.

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// perUnitStops is fakeUnits whose stops, once hung, hang until released;
// units in queue first tell that systemd has the stop.
type perUnitStops struct {
	*fakeUnits
	hang    atomic.Bool
	queue   map[string]bool
	release chan struct{}
	mu      sync.Mutex
	entered map[string]int
}

func (h *perUnitStops) Stop(ctx context.Context, unit string, queued func()) (bool, error) {
	if h.hang.Load() {
		h.mu.Lock()
		h.entered[unit]++
		h.mu.Unlock()
		if h.queue[unit] && queued != nil {
			queued()
		}
		<-h.release
	}
	return h.fakeUnits.Stop(ctx, unit, queued)
}

// leadWith runs a supervisor of units over store and u and returns it
// leading after 30s (fake time), with its clock.
func leadWith(t *testing.T, store *fakeStore, u Units, running func() bool, units ...string) (*Supervisor, Clock, context.CancelFunc) {
	t.Helper()
	m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	clock := BootClock()
	s := New("demo", units, "node-a", m, store, u, clock, logging.Text(&bytes.Buffer{}, slog.LevelInfo))
	ctx, cancel := context.WithCancel(t.Context())
	s.Start(ctx)
	time.Sleep(30 * time.Second)
	synctest.Wait()
	if !running() {
		cancel()
		t.Fatal("not leading after 30s")
	}
	return s, clock, cancel
}

// Probe (holds): a lease of two units, the deadline passes with Redis
// cut; systemd takes the stop of one (queued) and never answers for the
// other. The stop is late: one unit's queued does not clear the lease's
// pending stop. Once both return, nothing is late.
func TestBreakStopLateSeveralUnitsOneNeverQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		units := &perUnitStops{fakeUnits: &fakeUnits{}, queue: map[string]bool{"a.service": true},
			release: make(chan struct{}), entered: map[string]int{}}
		s, clock, cancel := leadWith(t, store, units, func() bool { r, _, _ := units.state(); return r }, "a.service", "b.service")
		defer cancel()
		released := false
		defer func() {
			if !released {
				close(units.release)
			}
		}()
		units.hang.Store(true)
		store.mu.Lock()
		store.cut = true
		store.mu.Unlock()
		time.Sleep(testTiming.Retry + testTiming.RenewDeadline + time.Second)
		synctest.Wait()
		units.mu.Lock()
		a, b := units.entered["a.service"], units.entered["b.service"]
		units.mu.Unlock()
		if a != 1 || b != 1 {
			t.Fatalf("stops entered: a %d, b %d; want one each", a, b)
		}
		const within = 100 * time.Millisecond
		p := s.stopping.Load()
		if p == nil || p.pending() != 1 || !s.StopLate(clock(), within) {
			t.Fatalf("a.service's stop queued, b.service's not: pending %+v, late %t; want one unit left, late", p, s.StopLate(clock(), within))
		}
		close(units.release)
		released = true
		synctest.Wait()
		if s.StopLate(clock(), within) || s.stopping.Load() != nil {
			t.Fatal("both stops returned, yet a stop is still pending")
		}
	})
}

// Probe (holds): the supervisor's ctx ends (the daemon removes the lease,
// or shuts down) while a deadline's stop hangs before systemd has it: the
// stop goes on (it ignores ctx's end), and so does the pending stop; the
// supervisor still reports it late. (Whether anyone still asks is the
// daemon's business: see TestBreakStopLateForgottenWhenALostLeaseIsRemoved.)
func TestBreakStopLateOutlivesTheSupervisorsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		units := &slowStops{fakeUnits: &fakeUnits{}, release: make(chan struct{})}
		s, clock, cancel := leadWith(t, store, units, func() bool { r, _, _ := units.state(); return r }, "demo.service")
		defer close(units.release)
		units.hang.Store(true)
		store.mu.Lock()
		store.cut = true
		store.mu.Unlock()
		time.Sleep(testTiming.Retry + testTiming.RenewDeadline + time.Second)
		synctest.Wait()
		cancel()
		<-s.Done()
		time.Sleep(time.Second)
		synctest.Wait()
		if !s.StopLate(clock(), 100*time.Millisecond) {
			t.Fatal("the supervisor ended while its deadline's stop hangs untaken: not late any more")
		}
	})
}

// Probe (holds): the startup stop, and every stop of a node that never
// held the lease, carry no deadline: a startup stop that hangs for ever
// makes nothing late (no false alarm on a node that runs nothing).
func TestBreakStopLateNotForTheStartupStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &fakeStore{t: t, noRelease: true}
		units := &slowStops{fakeUnits: &fakeUnits{}, release: make(chan struct{})}
		units.hang.Store(true)
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		clock := BootClock()
		s := New("demo", []string{"demo.service"}, "node-a", m, store, units, clock, logging.Text(&bytes.Buffer{}, slog.LevelInfo))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		defer close(units.release)
		s.Start(ctx)
		time.Sleep(time.Minute)
		synctest.Wait()
		if units.entered.Load() != 1 || s.stopping.Load() != nil || s.Stuck(clock(), 0) {
			t.Fatalf("startup stop hung a minute: %d stops, pending %+v, stuck %t; want one, none, no", units.entered.Load(), s.stopping.Load(), s.Stuck(clock(), 0))
		}
	})
}

// Probe (holds): a pending stop is cleared even when the stop of each
// unit both tells it is queued and returns (taken once per unit, never
// twice: left never goes below zero), and a lease whose stops all return
// at once (no queued call at all) clears it too.
func TestBreakStopLateTakenOncePerUnit(t *testing.T) {
	for _, queue := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			store := &fakeStore{t: t, noRelease: true}
			q := map[string]bool{"a.service": queue, "b.service": queue, "c.service": queue}
			units := &perUnitStops{fakeUnits: &fakeUnits{}, queue: q, release: make(chan struct{}), entered: map[string]int{}}
			s, clock, cancel := leadWith(t, store, units, func() bool { r, _, _ := units.state(); return r }, "a.service", "b.service", "c.service")
			defer cancel()
			units.hang.Store(true)
			store.mu.Lock()
			store.cut = true
			store.mu.Unlock()
			time.Sleep(testTiming.Retry + testTiming.RenewDeadline + time.Second)
			synctest.Wait()
			p := s.stopping.Load()
			switch {
			case queue && p != nil:
				t.Fatalf("every unit's stop queued, yet pending with %d left", p.pending())
			case !queue && (p == nil || p.pending() != 3):
				t.Fatalf("no unit's stop queued: pending %+v, want three left", p)
			}
			close(units.release)
			synctest.Wait()
			if s.stopping.Load() != nil || s.StopLate(clock(), 0) {
				t.Fatal("every stop returned, yet a stop is pending")
			}
			if p != nil && p.pending() != 0 {
				t.Fatalf("left %d after every unit's stop returned, want 0", p.pending())
			}
		})
	}
}
