package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/supervisor"
)

// fakeOffset is CLOCK_BOOTTIME's lead over CLOCK_MONOTONIC as a test
// sets it; brackets, if set, are the readings to give in turn (their
// width is the noise of a read).
type fakeOffset struct {
	mu       sync.Mutex
	slept    time.Duration
	brackets []supervisor.Offset
	reads    int
	fail     bool
}

func (f *fakeOffset) read() (supervisor.Offset, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail {
		return supervisor.Offset{}, fmt.Errorf("clock_gettime: invalid argument")
	}
	o := supervisor.Offset{}
	if len(f.brackets) > 0 {
		o = f.brackets[f.reads%len(f.brackets)]
	}
	f.reads++
	o.Lo += f.slept
	o.Hi += f.slept
	return o, nil
}

// suspend is a suspend of d: CLOCK_BOOTTIME ran on, CLOCK_MONOTONIC (and
// with it the runtime's timers, and synctest's fake time) did not.
func (f *fakeOffset) suspend(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.slept += d
}

func (f *fakeOffset) failing(fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fail
}

// takeOver makes node-b the holder of lease name, as a peer that took it.
func takeOver(store *memStore, name string) {
	store.mu.Lock()
	defer store.mu.Unlock()
	cur := store.current(name)
	cur.Holder, cur.Version, cur.Token, cur.Released = "node-b", cur.Version+1, strings.Repeat("b", 32), false
	store.write(name, cur)
}

// clockDaemon is testDaemon on a clock that counts the suspends of off,
// managing db.service (lease db) and vpn.service (lease vpn).
func clockDaemon(t *testing.T, off *fakeOffset, sd *fakeSystemd, store *memStore) (*Daemon, *syncBuffer) {
	t.Helper()
	d, logs := testDaemon(t, sd, store)
	d.clock = supervisor.SuspendClock(off.read)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	d.Reload(ctx)
	return d, logs
}

// TestSuspendWatchStopsEveryLeaderAtOnce: two leaders, then a suspend of
// an hour (the boot clock jumps, the monotonic one and the runtime's
// timers do not) while a peer takes both leases. The watch's first check
// after the resume wakes both supervisors, which stop their units with no
// fake time passing, before any runtime timer set before the suspend
// fires: each step sees its deadline an hour past.
func TestSuspendWatchStopsEveryLeaderAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off, store := &fakeOffset{}, newMemStore()
		sd := newFakeSystemd(map[string]string{"db.service": "db", "vpn.service": "vpn"})
		d, logs := clockDaemon(t, off, sd, store)
		w := newSuspendWatch(off.read, SuspendCheck, d.resumed)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for _, lease := range []string{"db", "vpn"} {
			if !sd.isActive(lease+".service") || store.record(lease).Holder != "node-a" {
				t.Fatalf("%s: not leading after 30s:\n%s", lease, logs)
			}
		}
		takeOver(store, "db")
		takeOver(store, "vpn")
		off.suspend(time.Hour)
		w.check()
		synctest.Wait() // no fake time passes: no timer set before the suspend fires
		for _, lease := range []string{"db", "vpn"} {
			if sd.isActive(lease + ".service") {
				t.Errorf("%s.service still runs on resume, an hour past its deadline", lease)
			}
		}
		if n := strings.Count(logs.String(), "UNITLEASE_EVENT=renew_failed"); n != 2 {
			t.Errorf("%d deadline stops (renew_failed), want 2:\n%s", n, logs)
		}
		if !strings.Contains(logs.String(), "suspended for at least 1h0m0s") {
			t.Errorf("the resume is not logged with its length:\n%s", logs)
		}
	})
}

// TestSuspendWatchReportsOnlyAJump: readings whose brackets overlap, as
// reads around a preemption give, and failed reads report nothing; a
// suspend is reported once, at the first check after it, with at least
// its length less the noise; then nothing again.
func TestSuspendWatchReportsOnlyAJump(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off := &fakeOffset{brackets: []supervisor.Offset{
			{Lo: 10 * time.Second, Hi: 10*time.Second + time.Microsecond},
			{Lo: 10*time.Second - time.Millisecond, Hi: 10*time.Second + time.Microsecond}, // preempted between its reads
			{Lo: 10*time.Second + time.Microsecond, Hi: 10*time.Second + 2*time.Microsecond},
		}}
		var mu sync.Mutex
		var reports []time.Duration
		w := newSuspendWatch(off.read, time.Second, func(slept time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			reports = append(reports, slept)
		})
		got := func() []time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return append([]time.Duration(nil), reports...)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go w.run(ctx)
		time.Sleep(100 * time.Second)
		off.failing(true)
		time.Sleep(10 * time.Second)
		off.failing(false)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if r := got(); len(r) != 0 {
			t.Fatalf("reported %v with no suspend", r)
		}
		off.suspend(time.Hour)
		time.Sleep(time.Second)
		synctest.Wait()
		if r := got(); len(r) != 1 || r[0] < time.Hour-2*time.Millisecond || r[0] > time.Hour {
			t.Fatalf("after a suspend of 1h, one check reported %v; want one report of about 1h", r)
		}
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if r := got(); len(r) != 1 {
			t.Fatalf("reported %v: the suspend again, or one that did not happen", r)
		}
	})
}
