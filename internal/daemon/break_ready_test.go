package daemon

// Adversarial review of READY=1 within ReadyWithin (firstReload), the
// watchdog that runs from before the first discovery, the "starting"
// STATUS= and the summary by count past SummaryUnits.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// gatedAnnounce is memStore whose SetAnnouncements waits for gate to
// close: a Redis slow to answer the announcement at the end of the first
// discovery, after every supervisor started.
type gatedAnnounce struct {
	*memStore
	gate chan struct{}
}

func (g *gatedAnnounce) SetAnnouncements(ctx context.Context, as []redislease.Announcement) error {
	<-g.gate
	return g.memStore.SetAnnouncements(ctx, as)
}

// startingDaemon is a daemon over sd and store whose messages to systemd
// are noted, logging through a hangLog of st (nil: plainly).
func startingDaemon(t *testing.T, sd Manager, store LeaseStore, st *hangState) (*Daemon, *notes, *syncBuffer) {
	t.Helper()
	tm, err := testTiming.Resolved()
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := logging.Text(logs, slog.LevelInfo)
	if st != nil {
		log = slog.New(hangLog{Handler: log.Handler(), st: st})
	}
	n := &notes{}
	d := New(&config.Config{Node: "node-a", Timing: tm}, log, store, sd, unitctl.Config{}, n.add)
	d.clock = stillClock()
	return d, n, logs
}

// since is the messages sent at or after from, and when each was.
func (n *notes) since(from time.Time) (ms []string, at []time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, t := range n.at {
		if !t.Before(from) {
			ms, at = append(ms, n.m[i]), append(at, t)
		}
	}
	return ms, at
}

func annotatedUnits(n int) map[string]string {
	a := map[string]string{}
	for i := range n {
		a[fmt.Sprintf("u%02d.service", i)] = fmt.Sprintf("l%02d", i)
	}
	return a
}

// TestBreakReadyWatchdogDuringALongFirstDiscovery: with the watchdog
// goroutine running from before the first discovery (as Run starts it),
// a discovery that outlasts ReadyWithin and many watchdog intervals
// sends READY=1 once, pings all along (systemd enforces the watchdog
// from READY on, and no loop is stuck), says "starting" in STATUS= while
// it lasts, and ends on the summary by count. Run under -race: the
// watchdog's tick, the early READY timer and the discovery share d.
func TestBreakReadyWatchdogDuringALongFirstDiscovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(annotatedUnits(30))
		slow := make(chan struct{})
		sd.slowCheck = slow
		d, n, logs := startingDaemon(t, sd, newMemStore(), nil)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const interval = 3 * time.Second
		go d.watchdog(ctx, interval)
		begun := time.Now()
		done := firstReloading(ctx, d)
		time.Sleep(ReadyWithin + 10*interval)
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("the discovery ended while Validate was held")
		default:
		}
		sent := n.all()
		if c := n.count("READY=1"); c != 1 {
			t.Fatalf("sent %q; want READY=1 once", sent)
		}
		// Pings every check, none withheld: nothing is stuck.
		ms, at := n.since(begun)
		var pings []time.Time
		for i, m := range ms {
			if m == "WATCHDOG=1" {
				pings = append(pings, at[i])
			}
		}
		check := watchdogCheck(interval)
		if len(pings) == 0 || pings[0].Sub(begun) > check {
			t.Fatalf("no ping within the first check of a discovery still validating: %q", sent)
		}
		for i := 1; i < len(pings); i++ {
			if gap := pings[i].Sub(pings[i-1]); gap > check {
				t.Fatalf("a ping %v after the last during the first discovery (check %v):\n%s", gap, check, logs)
			}
		}
		var starting int
		for _, m := range sent {
			if strings.HasPrefix(m, "STATUS=") && !strings.HasPrefix(m, "STATUS=starting: ") {
				t.Fatalf("STATUS= %q while the first discovery runs: want it to say starting", m)
			}
			if strings.HasPrefix(m, "STATUS=starting: ") {
				starting++
			}
		}
		if starting < 2 {
			t.Fatalf("sent %q; want the early STATUS= and the watchdog's starting ones", sent)
		}
		close(slow)
		<-done
		// The watchdog's next status update (every 15 checks) sends the
		// summary whatever "starting" one raced the end of the discovery.
		time.Sleep(16 * check)
		synctest.Wait()
		if c := n.count("READY=1"); c != 1 {
			t.Fatalf("sent %q; want READY=1 once", n.all())
		}
		all := n.all()
		var last string
		for _, m := range all {
			if strings.HasPrefix(m, "STATUS=") {
				last = m
			}
		}
		if strings.HasPrefix(last, "STATUS=starting") || strings.Contains(last, ".service") || !strings.Contains(last, "30 units") {
			t.Fatalf("last STATUS= %q after the discovery; want the 30 units by count", last)
		}
	})
}

// TestBreakWatchdogSeesALoopStuckDuringTheFirstDiscovery: a supervisor
// that the first discovery started hangs in a step (its journal entry
// blocks under its lock) while the discovery still runs (its last
// announcement waits for Redis). The watchdog, running since before the
// discovery, must withhold its pings within a check of the hang, READY=1
// gone out or not: a loop stuck at start is a loop stuck.
func TestBreakWatchdogSeesALoopStuckDuringTheFirstDiscovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd := newFakeSystemd(annotatedUnits(30))
		store := &gatedAnnounce{memStore: newMemStore(), gate: make(chan struct{})}
		st := &hangState{match: "u07.service: confirmed inactive", release: make(chan struct{})}
		st.armed.Store(true)
		d, n, logs := startingDaemon(t, sd, store, st)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const interval = 3 * time.Second
		go d.watchdog(ctx, interval)
		begun := time.Now()
		done := firstReloading(ctx, d)
		time.Sleep(ReadyWithin + 4*interval)
		synctest.Wait()
		st.mu.Lock()
		hung := st.at
		st.mu.Unlock()
		if hung.IsZero() {
			t.Fatalf("u07's step never hung:\n%s", logs)
		}
		if !d.starting.Load() {
			t.Fatal("the first discovery ended before the announcement was let through")
		}
		if c := n.count("READY=1"); c != 1 {
			t.Fatalf("sent %q; want READY=1 once, at ReadyWithin", n.all())
		}
		t.Logf("hung %v after the start; sent %q", hung.Sub(begun), n.all())
		check := watchdogCheck(interval)
		_, lastPing := n.when("WATCHDOG=1")
		if !lastPing.IsZero() && lastPing.Sub(hung) > check {
			t.Fatalf("pinged %v after a loop hung during the first discovery (check %v):\n%s", lastPing.Sub(hung), check, logs)
		}
		if !strings.Contains(logs.String(), "busy with one event") {
			t.Fatalf("no watchdog verdict of a busy loop:\n%s", logs)
		}
		// Once the loop and the discovery go on, the pings do too.
		close(st.release)
		close(store.gate)
		<-done
		resumed := time.Now()
		time.Sleep(2 * check)
		synctest.Wait()
		if _, last := n.when("WATCHDOG=1"); last.Before(resumed) {
			t.Fatalf("no ping after the loop went on:\n%s", logs)
		}
		if c := n.count("READY=1"); c != 1 {
			t.Fatalf("sent %q; want READY=1 once", n.all())
		}
	})
}

// TestBreakSummaryCountsPastSummaryUnits: STATUS= names the units one by
// one up to SummaryUnits units (not leases: a lease of three units counts
// three), sorted within each role, and past it gives each role's count,
// the counts adding up to every unit.
func TestBreakSummaryCountsPastSummaryUnits(t *testing.T) {
	for _, total := range []int{SummaryUnits, SummaryUnits + 1} {
		t.Run(fmt.Sprint(total), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				annotated := map[string]string{}
				var units []string
				for i := range total {
					u := fmt.Sprintf("u%02d.service", i)
					annotated[u] = fmt.Sprintf("l%02d", i/3) // three units a lease
					units = append(units, u)
				}
				sd := newFakeSystemd(annotated)
				d, _ := testDaemon(t, sd, newMemStore())
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				d.Reload(ctx)
				synctest.Wait()
				got := d.summary()
				t.Logf("summary: %s", got)
				if total <= SummaryUnits {
					var named []string
					for _, part := range strings.Split(got, "; ") {
						_, list, ok := strings.Cut(part, ": ")
						if !ok {
							t.Fatalf("summary %q: part %q has no role", got, part)
						}
						us := strings.Split(list, ", ")
						if !slices.IsSorted(us) {
							t.Fatalf("summary %q: units of a role not sorted", got)
						}
						named = append(named, us...)
					}
					slices.Sort(named)
					if !slices.Equal(named, units) {
						t.Fatalf("summary %q names %q; want every unit of %q", got, named, units)
					}
					return
				}
				sum := 0
				for _, part := range strings.Split(got, "; ") {
					var role string
					var c int
					if _, err := fmt.Sscanf(strings.Replace(part, ": ", " ", 1), "%s %d units", &role, &c); err != nil {
						t.Fatalf("summary %q: part %q is no count: %v", got, part, err)
					}
					sum += c
				}
				if sum != total || strings.Contains(got, ".service") {
					t.Fatalf("summary %q; want counts adding up to %d units", got, total)
				}
			})
		})
	}
}
