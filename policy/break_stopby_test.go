package policy

// Adversarial review of commit 267da82 (Action.By): a random walk of
// one machine against a random environment that answers every action,
// some answers late, with handoffs, unit failures, eligibility changes
// and nudges thrown in, ticking on time at every wake-up. It passes: it
// documents what held.

import (
	"math/rand/v2"
	"testing"
	"time"
)

type walkEvent struct {
	at Instant
	e  Event
}

// TestBreakStopByRandomWalk checks every StopUnit the machine issues:
//   - one with a deadline (By != 0) is never issued after it (with every
//     step on time, the deadline step is the first at or past it): no stop
//     is late the moment it is decided, whatever stopped it;
//   - By is zero exactly for the startup stop and a stop issued from
//     stop_failed;
//   - while the stop is outstanding and the node holds the lease, By is
//     never after the deadline of the last successful renewal (it errs
//     early, never late: no unsafety from By itself).
//
// It also measures how far the true deadline moves past a stale By while
// renewals keep succeeding during a stop (the false-alarm margin).
func TestBreakStopByRandomWalk(t *testing.T) {
	fast := Timing{Retry: 200 * time.Millisecond, RenewDeadline: 600 * time.Millisecond, StopWait: time.Second,
		ReplyMax: 150 * time.Millisecond, PollMin: 50 * time.Millisecond, PollMax: 100 * time.Millisecond, Allowance: 1200 * time.Millisecond}
	for _, tm := range []Timing{DefaultTiming(), fast} {
		rt, err := tm.Resolved()
		if err != nil {
			t.Fatal(err)
		}
		var stops, withBy, forcedRetries int
		var stale time.Duration
		for seed := range uint64(300) {
			rng := rand.New(rand.NewPCG(seed, 17))
			m, err := New(Config{Timing: tm, Seed: seed, RenewGrid: tm.Retry / 10})
			if err != nil {
				t.Fatal(err)
			}
			var now Instant
			wake := Instant(0)
			var queue []walkEvent
			other := uint64(1)
			randDur := func(d time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(d) + 1)) }
			var outBy Instant
			outstanding := false
			nextExternal := Instant(randDur(20 * rt.Retry))
			for range 3000 {
				// The next event: the earliest of the queue, the wake-up,
				// the next external event.
				next, idx := nextExternal, -2
				if wake != Never && wake <= next {
					next, idx = wake, -1
				}
				for i, q := range queue {
					if q.at < next {
						next, idx = q.at, i
					}
				}
				now = max(now, next)
				var e Event
				switch idx {
				case -1:
					e = Event{Kind: Tick}
				case -2:
					ks := []EventKind{UnitFailed, HandoffRequested, Ineligible, Eligible, Nudge}
					e = Event{Kind: ks[rng.IntN(len(ks))]}
					nextExternal = now.Add(randDur(20 * rt.Retry))
				default:
					e = queue[idx].e
					queue = append(queue[:idx], queue[idx+1:]...)
				}
				before := m
				var out Output
				m, out = m.Step(now, e)
				wake = out.Wake
				if e.Kind == UnitStopped || e.Kind == UnitStopFailed {
					outstanding = false
				}
				for a := range out.Actions() {
					reply := func(d time.Duration, ev Event) { queue = append(queue, walkEvent{now.Add(d), ev}) }
					rep := randDur(rt.ReplyMax * 6 / 5) // a fifth of them late
					switch a.Kind {
					case Observe:
						switch rng.IntN(5) {
						case 0:
							reply(rep, Event{Kind: ObserveFailed})
						case 1:
							reply(rep, Event{Kind: Observed, Record: Absent})
						case 2:
							other++
							reply(rep, Event{Kind: Observed, Record: released("b", other)})
						default:
							reply(rep, Event{Kind: Observed, Record: held("b", other)})
						}
					case Acquire:
						switch rng.IntN(4) {
						case 0:
							reply(rep, Event{Kind: AcquireLost})
						case 1:
							reply(rep, Event{Kind: AcquireUnknown})
						default:
							reply(rep, Event{Kind: AcquireOK, Record: held("a", a.Record.Version+1)})
						}
					case Renew:
						r := held("a", a.Record.Version+1)
						r.StopFailed = a.Record.StopFailed
						switch k := rng.IntN(20); {
						case k == 0:
							other++
							reply(rep, Event{Kind: RenewLost, Record: held("b", other)})
						case k == 1:
							reply(rep, Event{Kind: RenewMissing})
						case k < 6:
							reply(rep, Event{Kind: RenewFailed})
						default:
							reply(rep, Event{Kind: RenewOK, Record: r})
						}
					case Release:
						reply(rep, Event{Kind: []EventKind{ReleaseOK, ReleaseFailed}[rng.IntN(2)]})
					case StartUnit:
						reply(randDur(2*rt.ReplyMax), Event{Kind: []EventKind{UnitStarted, UnitStarted, UnitStartFailed}[rng.IntN(3)]})
					case StopUnit:
						stops++
						d := randDur(rt.StopWait)
						if rng.IntN(3) == 0 {
							d = rt.StopWait + randDur(3*rt.Retry) // a stop hung a while
						}
						reply(d, Event{Kind: []EventKind{UnitStopped, UnitStopped, UnitStopFailed}[rng.IntN(3)]})
						again := before.state == StopFailed
						switch {
						case a.By != 0 && (again || m.cause == CauseStartup):
							t.Fatalf("seed %d at %v: stop (cause %v, from %v) due by %v; want no deadline", seed, now, m.cause, before.state, a.By)
						case a.By == 0 && !again && m.cause != CauseStartup:
							t.Fatalf("seed %d at %v: stop (cause %v, from %v) with no deadline", seed, now, m.cause, before.state)
						case a.By != 0 && a.By < now:
							t.Fatalf("seed %d at %v: stop (cause %v) issued %v after its deadline %v, on a step taken on time",
								seed, now, m.cause, now.Sub(a.By), a.By)
						}
						if a.By != 0 {
							withBy++
						}
						if a.By == 0 && again && (m.cause == CauseRenewFailed || m.cause == CauseLost || m.cause == CauseMissing) {
							forcedRetries++
						}
						outBy, outstanding = a.By, a.By != 0
					}
				}
				if outstanding && m.job == StopUnit && m.holding {
					if d := m.deadline(); outBy > d {
						t.Fatalf("seed %d at %v: a stop due by %v, after the deadline %v of the last renewal", seed, now, outBy, d)
					} else {
						stale = max(stale, d.Sub(outBy))
					}
				}
			}
		}
		if stops == 0 || withBy == 0 {
			t.Fatalf("%v: %d stops, %d with a deadline: the walk never got there", tm, stops, withBy)
		}
		t.Logf("retry %v renew_deadline %v: %d stops, %d due by a deadline, %d lease-forced stops tried again with none; "+
			"a stop's By fell up to %v behind the deadline of the renewals that succeeded while it ran",
			tm.Retry, tm.RenewDeadline, stops, withBy, forcedRetries, stale)
	}
}
