package daemon

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
)

// fakeLogind is logind for handleSleep: its locks, and the signals the
// test sends. atClose, if set, is called as a lock closes.
type fakeLogind struct {
	sigs    chan bool
	fail    error // Inhibit fails with it
	atClose func()

	mu    sync.Mutex
	locks []*fakeLock
}

type fakeLock struct {
	l      *fakeLogind
	closes int
	closed chan struct{}
}

func (f *fakeLogind) Inhibit(context.Context) (io.Closer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	l := &fakeLock{l: f, closed: make(chan struct{})}
	f.locks = append(f.locks, l)
	return l, nil
}

func (f *fakeLogind) PrepareForSleep() <-chan bool { return f.sigs }

func (f *fakeLogind) InhibitDelayMax(context.Context) (time.Duration, error) { return time.Hour, nil }

// lock is the i-th lock taken, and how many times it was closed (nil, 0
// if it was not taken).
func (f *fakeLogind) lock(i int) (*fakeLock, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i >= len(f.locks) {
		return nil, 0
	}
	return f.locks[i], f.locks[i].closes
}

func (l *fakeLock) Close() error {
	if l.l.atClose != nil {
		l.l.atClose()
	}
	l.l.mu.Lock()
	defer l.l.mu.Unlock()
	l.closes++
	if l.closes == 1 {
		close(l.closed)
	}
	return nil
}

// countingStore counts the observations.
type countingStore struct {
	*memStore
	observes atomic.Int64
}

func (c *countingStore) Observe(ctx context.Context, name string) (policy.Record, error) {
	c.observes.Add(1)
	return c.memStore.Observe(ctx, name)
}

// TestSleepHandsOffThenLetsTheMachineSleep: on PrepareForSleep(true)
// every lease held here is handed off (units stopped, leases released)
// before the lock is closed, within sleepLimit; on PrepareForSleep(false),
// after an hour asleep, every supervisor steps at once (the backed-off
// standbys observe with no fake time passing) and a new lock is taken;
// the lock is closed when the daemon stops.
func TestSleepHandsOffThenLetsTheMachineSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		off, store := &fakeOffset{}, newMemStore()
		sd := newFakeSystemd(map[string]string{"db.service": "db", "vpn.service": "vpn"})
		d, logs := testDaemon(t, sd, store)
		d.clock = supervisor.SuspendClock(off.read)
		counting := &countingStore{memStore: store}
		d.store = counting
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		d.Reload(ctx)

		var atClose []string // what ran, and what was held, as the first lock closed
		lg := &fakeLogind{sigs: make(chan bool)}
		lg.atClose = func() {
			if atClose != nil {
				return
			}
			atClose = []string{}
			for _, lease := range []string{"db", "vpn"} {
				if sd.isActive(lease + ".service") {
					atClose = append(atClose, lease+".service active")
				}
				if rec := store.record(lease); !rec.Released {
					atClose = append(atClose, lease+" "+rec.String())
				}
			}
		}
		done := make(chan struct{})
		go func() {
			d.handleSleep(ctx, lg)
			close(done)
		}()
		time.Sleep(30 * time.Second)
		synctest.Wait()
		for _, lease := range []string{"db", "vpn"} {
			if !sd.isActive(lease+".service") || store.record(lease).Holder != "node-a" {
				t.Fatalf("%s: not leading after 30s:\n%s", lease, logs)
			}
		}

		lg.sigs <- true
		first, _ := lg.lock(0)
		select {
		case <-first.closed:
		case <-time.After(d.sleepLimit()):
			t.Fatalf("the lock was not closed within %v of PrepareForSleep(true):\n%s", d.sleepLimit(), logs)
		}
		if len(atClose) != 0 {
			t.Fatalf("the lock closed (the machine may sleep) with %v:\n%s", atClose, logs)
		}

		off.suspend(time.Hour)
		at, before := time.Now(), counting.observes.Load()
		lg.sigs <- false
		synctest.Wait()
		if after := counting.observes.Load(); after <= before || !time.Now().Equal(at) {
			t.Fatalf("on resume: %d observations at once (%v later), want some with no time passing", after-before, time.Since(at))
		}
		second, closes := lg.lock(1)
		if second == nil || closes != 0 {
			t.Fatalf("no new lock held after the resume:\n%s", logs)
		}

		cancel()
		<-done
		if _, closes := lg.lock(1); closes != 1 {
			t.Fatalf("the lock was closed %d times as the daemon stopped, want once", closes)
		}
		if _, closes := lg.lock(0); closes != 1 {
			t.Fatalf("the first lock was closed %d times, want once", closes)
		}
	})
}

// TestSleepWithoutLogind: where no lock can be taken, handleSleep logs it
// once, at info, and returns.
func TestSleepWithoutLogind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d, logs := testDaemon(t, newFakeSystemd(nil), newMemStore())
		lg := &fakeLogind{sigs: make(chan bool), fail: errors.New("org.freedesktop.DBus.Error.ServiceUnknown: The name org.freedesktop.login1 was not provided by any .service files")}
		done := make(chan struct{})
		go func() {
			d.handleSleep(t.Context(), lg)
			close(done)
		}()
		synctest.Wait()
		select {
		case <-done:
		default:
			t.Fatal("handleSleep waits for signals without a lock")
		}
		if n, lines := strings.Count(logs.String(), "logind cannot be reached"), strings.Count(logs.String(), "\n"); n != 1 || lines != 1 || !strings.Contains(logs.String(), "level=INFO") {
			t.Fatalf("want one info line saying logind cannot be reached:\n%s", logs)
		}
	})
}

func TestPrepareForSleepSignal(t *testing.T) {
	name := "org.freedesktop.login1.Manager.PrepareForSleep"
	for _, c := range []struct {
		sig          *dbus.Signal
		sleeping, ok bool
	}{
		{&dbus.Signal{Name: name, Body: []any{true}}, true, true},
		{&dbus.Signal{Name: name, Body: []any{false}}, false, true},
		{&dbus.Signal{Name: "org.freedesktop.login1.Manager.PrepareForShutdown", Body: []any{true}}, false, false},
		{&dbus.Signal{Name: name}, false, false},
		{&dbus.Signal{Name: name, Body: []any{"true"}}, false, false},
		{nil, false, false},
	} {
		if sleeping, ok := prepareForSleep(c.sig); sleeping != c.sleeping || ok != c.ok {
			t.Errorf("%+v: %t %t, want %t %t", c.sig, sleeping, ok, c.sleeping, c.ok)
		}
	}
}

// TestSleepDelayWarning: logind's default InhibitDelayMaxSec= (5s) is
// shorter than the default stop_wait and a reply: warned about.
func TestSleepDelayWarning(t *testing.T) {
	tm := policy.DefaultTiming()
	if w := sleepDelayWarning(5*time.Second, tm); !strings.Contains(w, "raise InhibitDelayMaxSec=") {
		t.Errorf("5s against stop_wait %v + reply_max %v: %q", tm.StopWait, tm.ReplyMax, w)
	}
	if w := sleepDelayWarning(tm.StopWait+tm.ReplyMax, tm); w != "" {
		t.Errorf("a limit of exactly a stop and a reply warned: %q", w)
	}
}
