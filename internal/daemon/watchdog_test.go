package daemon

import (
	"context"
	"errors"
	"math"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/unitlease/unitlease/policy"
)

// stuckKind is how a daemon stops acting on a deadline.
type stuckKind int

const (
	frozen  stuckKind = iota // the whole process stops (SIGSTOP, swap): no tick comes
	busy                     // one loop's step hangs
	overdue                  // one loop's timer does not fire
)

func (k stuckKind) String() string { return [...]string{"frozen", "busy", "overdue"}[k] }

// lastPing simulates the watchdog's ticks, every watchdogCheck(interval)
// from phase on, with a daemon that stops acting at stuck (a loop busy
// since then, or due then and never stepping, or the process frozen
// then), and returns when the last ping reached systemd. Each verdict
// looks for loops stuck more than half the check, and its ping goes out
// as late as the watchdog lets it, half the check later (a frozen process
// sends nothing after it froze, and finds its verdict stale when thawed).
// Ticks before stuck ping; the simulation ends a few intervals later.
func lastPing(kind stuckKind, interval, phase, stuck time.Duration) time.Duration {
	check := watchdogCheck(interval)
	last, lastOverdue := time.Duration(-1), false
	for t := phase; t < stuck+4*interval; t += check {
		if kind == frozen && t > stuck {
			break
		}
		isBusy := kind == busy && t > stuck && t-stuck > check/2
		isOverdue := kind == overdue && t > stuck && t-stuck > check/2
		ping, _ := pingVerdict(isBusy, isOverdue, lastOverdue)
		lastOverdue = isOverdue
		sent := t + check/2
		if ping && (kind != frozen || sent <= stuck) {
			last = sent
		}
	}
	return last
}

// TestKillAllowanceCoversAStuckDaemon: a daemon that stops acting at any
// moment, in any of the three ways, is killed by systemd (no ping for
// WatchdogSec, then SIGABRT and TimeoutAbortSec) within KillAllowance of
// that moment, whatever the phase of its ticks.
func TestKillAllowanceCoversAStuckDaemon(t *testing.T) {
	for _, interval := range []time.Duration{450 * time.Millisecond, time.Second, 2 * time.Second, 10 * time.Second} {
		for _, abort := range []time.Duration{100 * time.Millisecond, time.Second} {
			allowance := KillAllowance(interval, abort)
			check := watchdogCheck(interval)
			for _, kind := range []stuckKind{frozen, busy, overdue} {
				for i := range 50 {
					phase := check * time.Duration(i) / 50
					stuck := 10*interval + time.Duration(i)*time.Millisecond
					last := lastPing(kind, interval, phase, stuck)
					if killed := last + interval + abort; killed-stuck > allowance {
						t.Fatalf("WatchdogSec %v, TimeoutAbortSec %v, %v at %v (ticks from %v): last ping %v, killed %v after it got stuck, over the allowance %v",
							interval, abort, kind, stuck, phase, last, killed-stuck, allowance)
					}
				}
			}
		}
	}
}

// TestWatchdogPingsInTimeAcrossOneOverdueTick: a loop overdue at one tick
// (a resume not yet noticed) that steps once woken costs one ping: the
// pings around it are two checks apart, inside the interval.
func TestWatchdogPingsInTimeAcrossOneOverdueTick(t *testing.T) {
	for _, interval := range []time.Duration{450 * time.Millisecond, 2 * time.Second} {
		check := watchdogCheck(interval)
		if ping, wake := pingVerdict(false, true, false); ping || !wake {
			t.Fatalf("a newly overdue loop: ping %t wake %t, want no ping and a wake", ping, wake)
		}
		if ping, _ := pingVerdict(false, false, true); !ping {
			t.Fatal("the tick after the woken loops stepped withholds the ping")
		}
		if gap := 2 * check; gap >= interval {
			t.Fatalf("WatchdogSec %v: one withheld tick leaves %v between pings", interval, gap)
		}
	}
}

// TestSafeMinimumCoversAStuckLeader: with the allowance of its watchdog
// in the timing, a leader stuck just before its deadline, cut off from
// Redis, has its unit stopped (by systemd, through BindsTo=) before a
// standby may take over: within the lease span, however its clock and the
// standby's drift. Before the allowance entered the lease span, the
// packaged watchdog (10s, TimeoutAbortSec 2s) let the unit live 12s past
// a 1.072s margin, and the fast profile's 90ms past its span.
func TestSafeMinimumCoversAStuckLeader(t *testing.T) {
	if got := KillAllowance(2*time.Second, time.Second); got != policy.DefaultAllowance {
		t.Fatalf("the packaged unitlease.service (WatchdogSec=2s, TimeoutAbortSec=1s) gives %v, policy.DefaultAllowance is %v", got, policy.DefaultAllowance)
	}
	fast := policy.Timing{Retry: 200 * time.Millisecond, RenewDeadline: 900 * time.Millisecond, StopWait: time.Second,
		ReplyMax: 150 * time.Millisecond, PollMin: 50 * time.Millisecond, PollMax: 100 * time.Millisecond}
	for _, c := range []struct {
		name          string
		t             policy.Timing
		interval, abt time.Duration
	}{
		{"defaults", policy.DefaultTiming(), 2 * time.Second, time.Second},
		{"fast", fast, 450 * time.Millisecond, 100 * time.Millisecond},
		{"long watchdog", policy.DefaultTiming(), 30 * time.Second, 5 * time.Second},
	} {
		c.t.Allowance = KillAllowance(c.interval, c.abt)
		tm, err := c.t.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		const rho = float64(policy.DriftPPM) / 1e6
		deadline := tm.Retry + tm.RenewDeadline
		for _, kind := range []stuckKind{frozen, busy, overdue} {
			for _, early := range []time.Duration{0, time.Millisecond, 10 * time.Millisecond, watchdogCheck(c.interval)} {
				stuck := deadline - early
				worst := time.Duration(0)
				for i := range 50 {
					phase := watchdogCheck(c.interval) * time.Duration(i) / 50
					worst = max(worst, lastPing(kind, c.interval, phase, stuck)+c.interval+c.abt)
				}
				// The unit is dead stop_wait after the kill, on the
				// leader's clock (slow by ρ at most); the standby counts
				// the lease span from the renewal on, fast by ρ at most.
				dead := float64(worst+tm.StopWait) * (1 + rho)
				if took := float64(tm.LeaseSpan) * (1 - rho); dead > took {
					t.Errorf("%s: %v %v before its deadline: the unit lives %v after the renewal, past the %v a standby waits",
						c.name, kind, early, time.Duration(dead), time.Duration(took))
				}
			}
		}
	}
}

// TestRunRefusesNoWatchdog: without a watchdog nothing bounds how late a
// hung daemon stops its units; with one the allowance follows it.
func TestRunRefusesNoWatchdog(t *testing.T) {
	sd := newFakeSystemd(nil)
	t.Setenv("WATCHDOG_USEC", "")
	if _, _, err := watchdogAllowance(context.Background(), sd, "unitlease.service"); !errors.Is(err, ErrNoWatchdog) {
		t.Fatalf("no watchdog: %v, want ErrNoWatchdog", err)
	}
	t.Setenv("WATCHDOG_USEC", "450000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	interval, allowance, err := watchdogAllowance(context.Background(), sd, "unitlease.service")
	if err != nil || interval != 450*time.Millisecond || allowance != KillAllowance(450*time.Millisecond, 2*time.Second) {
		t.Fatalf("450ms: interval %v allowance %v err %v", interval, allowance, err)
	}
	if err := CheckAllowance(time.Second, math.MaxInt64); err == nil {
		t.Fatal("TimeoutAbortSec=infinity accepted")
	}
	// systemctl service-watchdogs no: no watchdog is enforced at all.
	sd.watchdogsOff.Store(true)
	if _, _, err := watchdogAllowance(context.Background(), sd, "unitlease.service"); !errors.Is(err, ErrNoWatchdog) {
		t.Fatalf("service watchdogs off: %v, want ErrNoWatchdog", err)
	}
}

// TestServiceWatchdogsTurnedOffUnderTheDaemon: a daemon that finds
// service watchdogs turned off while it runs says it must exit (it hands
// every lease off first); turned on, nothing.
func TestServiceWatchdogsTurnedOffUnderTheDaemon(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "2000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	sd := newFakeSystemd(nil)
	d, _ := testDaemon(t, sd, newMemStore())
	_, allowance, err := watchdogAllowance(context.Background(), sd, "unitlease.service")
	if err != nil {
		t.Fatal(err)
	}
	d.cfg.Timing.Allowance = allowance
	if err := d.allowanceGrew(context.Background()); err != nil {
		t.Fatalf("nothing changed: %v", err)
	}
	sd.watchdogsOff.Store(true)
	if err := d.allowanceGrew(context.Background()); !errors.Is(err, ErrNoWatchdog) {
		t.Fatalf("service watchdogs turned off: %v, want ErrNoWatchdog", err)
	}
}
