package policy

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// driver steps one machine and checks each step. Its methods stop the test
// on the first surprise.
type driver struct {
	t   testing.TB
	m   Machine
	now Instant
	out Output
}

func newDriver(t testing.TB, tm Timing) *driver {
	t.Helper()
	m, err := New(Config{Timing: tm, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	return &driver{t: t, m: m}
}

// at steps with e at instant at (a duration since the origin).
func (d *driver) at(at time.Duration, e Event) *driver {
	d.t.Helper()
	d.now = Instant(at)
	d.m, d.out = d.m.Step(d.now, e)
	if d.out.Wake <= d.now {
		d.t.Fatalf("at %v after %v: wake %v is not in the future", d.now, e, d.out.Wake)
	}
	return d
}

// after steps with e, dt after the last step.
func (d *driver) after(dt time.Duration, e Event) *driver {
	d.t.Helper()
	return d.at(time.Duration(d.now)+dt, e)
}

// wake ticks at the instant the last step asked for.
func (d *driver) wake() *driver {
	d.t.Helper()
	if d.out.Wake == Never {
		d.t.Fatalf("at %v in %v: no wake to tick at", d.now, d.m.State())
	}
	return d.at(time.Duration(d.out.Wake), Event{Kind: Tick})
}

// want checks the state and the kinds of the last step's actions.
func (d *driver) want(st State, kinds ...ActionKind) *driver {
	d.t.Helper()
	var got []ActionKind
	for a := range d.out.Actions() {
		got = append(got, a.Kind)
	}
	if d.m.State() != st || !slices.Equal(got, kinds) {
		d.t.Fatalf("at %v: %v %v, want %v %v", d.now, d.m.State(), got, st, kinds)
	}
	return d
}

func (d *driver) journal(j Journal) *driver {
	d.t.Helper()
	if d.out.Journal != j {
		d.t.Fatalf("at %v: journal %q, want %q", d.now, d.out.Journal, j)
	}
	return d
}

func (d *driver) action(i int) Action { return d.out.At(i) }

func (d *driver) has(k ActionKind) bool {
	for a := range d.out.Actions() {
		if a.Kind == k {
			return true
		}
	}
	return false
}

func held(node string, v uint64) Record {
	return Record{Present: true, Raw: fmt.Sprintf(`{"holder":%q,"version":%d}`, node, v), Holder: node, Token: node, Version: v}
}

func released(node string, v uint64) Record {
	r := held(node, v)
	r.Raw += " released"
	r.Released = true
	return r
}

func ev(k EventKind) Event             { return Event{Kind: k} }
func seen(r Record) Event              { return Event{Kind: Observed, Record: r} }
func with(k EventKind, r Record) Event { return Event{Kind: k, Record: r} }

// booted is a driver past the startup stop, with its first observation out.
func booted(t testing.TB, tm Timing) *driver {
	d := newDriver(t, tm)
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	return d.at(0, ev(UnitStopped)).want(Standby, Observe).journal(JournalStopped)
}

// leader is a driver that holds the lease from instant 0 with its unit
// active: it acquired over a released record sent at 0.
func leader(t testing.TB, tm Timing) *driver {
	d := booted(t, tm)
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.at(s, with(AcquireOK, held("a", 2))).want(Starting, StartUnit).journal(JournalAcquired)
	return d.at(2*s, ev(UnitStarted)).want(Leader).journal(JournalStarted)
}

func TestStartupStopsTheUnitFirst(t *testing.T) {
	d := newDriver(t, DefaultTiming())
	if d.m.State() != Stopping || d.m.Cause() != CauseStartup {
		t.Fatalf("New: %v %v", d.m.State(), d.m.Cause())
	}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.after(s, ev(Tick)).want(Stopping) // the stop is outstanding
	d.after(s, seen(Absent)).want(Stopping)
	d.after(s, ev(UnitStopped)).want(Standby, Observe) // nothing held: no release, no backoff
}

func TestStandbyAcquiresAfterTheLeaseSpanUnchanged(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	span := tm.SafeMinimum()
	d.at(0, seen(held("b", 1))).want(Standby)
	for range 20 {
		d.wake().want(Standby, Observe)
		d.after(0, seen(held("b", 1)))
		if d.m.Age(d.now) >= span {
			d.want(Acquiring, Acquire)
			if a := d.action(0); !a.Record.Same(held("b", 1)) {
				t.Fatalf("acquire over %v, want the record observed", a.Record)
			}
			return
		}
		d.want(Standby)
	}
	t.Fatal("never acquired")
}

// TestStandbyWaitsTheWritersLongerSpan: a holder whose record says a
// longer lease span than this node's may run its unit that long; the
// standby waits it out, and keeps it when the key then goes missing.
func TestStandbyWaitsTheWritersLongerSpan(t *testing.T) {
	tm := DefaultTiming()
	own := tm.SafeMinimum()
	long := held("b", 1)
	long.LeaseSpan = own + 20*s
	for _, c := range []struct {
		name  string
		after Record // what the key holds once the long record was seen
	}{
		{"the record stays", long},
		{"the key goes missing", Absent},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := booted(t, tm)
			d.at(0, seen(long)).want(Standby)
			d.wake().want(Standby, Observe)
			d.after(0, seen(c.after))
			origin := d.now
			if c.after.Present {
				origin = 0
			}
			for range 100 {
				d.wake().want(Standby, Observe)
				d.after(0, seen(c.after))
				age := d.now.Sub(origin)
				if d.m.State() == Acquiring {
					if age < long.LeaseSpan {
						t.Fatalf("acquired at age %v: under the writer's span %v", age, long.LeaseSpan)
					}
					return
				}
				if age >= long.LeaseSpan+tm.PollMax {
					t.Fatalf("still %v at age %v, past the writer's span %v", d.m.State(), age, long.LeaseSpan)
				}
			}
			t.Fatal("never acquired")
		})
	}
}

func TestPollIntervalsAreJitteredWithinRange(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	seenDelays := map[time.Duration]bool{}
	for i := range 200 {
		d.after(0, seen(held("b", uint64(i))))
		delay := d.out.Wake.Sub(d.now)
		if delay < tm.PollMin || delay > tm.PollMax {
			t.Fatalf("poll after %v, outside [%v, %v]", delay, tm.PollMin, tm.PollMax)
		}
		seenDelays[delay] = true
		d.wake().want(Standby, Observe)
	}
	if len(seenDelays) < 150 {
		t.Fatalf("only %d distinct delays in 200", len(seenDelays))
	}
}

func TestAgeResetsOnAnyChange(t *testing.T) {
	tm := DefaultTiming()
	span := tm.SafeMinimum()
	d := booted(t, tm)
	d.at(0, seen(held("b", 1)))
	d.at(time.Duration(d.out.Wake)-1, ev(Tick)).want(Standby) // an early tick is harmless
	d.at(30*s, ev(Tick)).want(Standby, Observe)
	d.at(31*s, seen(held("b", 2))) // renewed: a new value
	if _, since, _ := d.m.Seen(); since != Instant(31*s) {
		t.Fatalf("age origin %v, want +31s", since)
	}
	for d.m.State() == Standby {
		d.wake().want(Standby, Observe)
		d.after(0, seen(held("b", 2)))
	}
	d.want(Acquiring, Acquire)
	if age := d.now.Sub(Instant(31 * s)); age < span || age > span+tm.PollMax {
		t.Fatalf("acquired at age %v, want the first poll from %v on", age, span)
	}
}

func TestMissingKeyIsAValue(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(held("b", 1)))
	d.wake().want(Standby, Observe)
	d.after(0, seen(Absent)).want(Standby)
	if r, since, ok := d.m.Seen(); !ok || r.Present || since != d.now {
		t.Fatalf("seen %v since %v (%t)", r, since, ok)
	}
}

func TestMissingKeyAgesLikeAnyValueThenConfirms(t *testing.T) {
	tm := DefaultTiming()
	tm.PollMin, tm.PollMax = 11*s, 11*s
	span := tm.SafeMinimum()
	d := booted(t, tm)
	d.at(0, seen(Absent))
	for d.m.State() == Standby {
		d.wake().want(Standby, Observe)
		d.after(time.Second, seen(Absent))
	}
	d.want(Acquiring, Acquire)
	if a := d.action(0); a.Record.Present {
		t.Fatalf("acquire over %v, want over the missing key", a.Record)
	}
	if d.now < Instant(span) {
		t.Fatalf("acquired at %v, before the lease span %v", d.now, span)
	}
	acquireAt := d.now
	d.after(s, with(AcquireOK, held("a", 1))).want(Confirming).journal(JournalAcquired)
	confirmAt := d.now.Add(tm.confirmWait())
	// Renew on the usual cadence; no start until a renewal sent after the wait.
	for d.m.State() == Confirming {
		d.wake().want(Confirming, Renew)
		sent := d.now
		d.after(s, with(RenewOK, held("a", 2)))
		if sent < confirmAt && d.m.State() != Confirming {
			t.Fatalf("started after a renewal sent at %v, before %v", sent, confirmAt)
		}
	}
	d.want(Starting, StartUnit)
	if d.now.Sub(acquireAt) > tm.confirmWait()+tm.Retry+2*s {
		t.Fatalf("confirmed only at %v", d.now)
	}
}

// A missing key seen on both sides of a gap longer than observeGap may have
// been a record in between: the age starts over.
func TestMissingKeyAfterAGapStartsOver(t *testing.T) {
	tm := DefaultTiming()
	tm.PollMin, tm.PollMax = 11*s, 11*s
	d := booted(t, tm)
	d.at(0, seen(Absent))
	d.wake().want(Standby, Observe)
	d.after(0, ev(ObserveFailed)).want(Standby) // the gap grows
	d.wake().want(Standby, Observe)
	sent := d.now
	d.after(s, seen(Absent))
	if d.m.Age(d.now) != 0 {
		t.Fatalf("age %v after a gap", d.m.Age(d.now))
	}
	// Within the gap, absence keeps its age: sent, 1s, 11s, 3s < 16s.
	if d.now.Sub(sent)+tm.PollMax+3*s > tm.observeGap() {
		t.Fatal("test arithmetic")
	}
	d.wake().want(Standby, Observe)
	d.after(3*s, seen(Absent))
	if d.m.Age(d.now) == 0 {
		t.Fatal("age reset without a gap")
	}
	// A present record is unique: its age survives any gap.
	d.after(0, ev(Tick))
	d.wake().want(Standby, Observe)
	d.after(0, seen(held("b", 1)))
	d.wake().want(Standby, Observe)
	d.after(0, ev(ObserveFailed))
	d.wake().want(Standby, Observe)
	d.after(0, ev(ObserveFailed))
	d.wake().want(Standby, Observe)
	d.after(0, seen(held("b", 1)))
	if d.m.Age(d.now) < 3*tm.PollMin {
		t.Fatalf("age %v: a present record's age must survive gaps", d.m.Age(d.now))
	}
}

func TestReleasedRecordIsAcquiredAtOnce(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 4))).want(Acquiring, Acquire)
	if a := d.action(0); !a.Record.Same(released("b", 4)) {
		t.Fatalf("acquire over %v", a.Record)
	}
}

func TestAcquireUnknownReobservesAndNeverStarts(t *testing.T) {
	for _, k := range []EventKind{AcquireUnknown, AcquireLost} {
		d := booted(t, DefaultTiming())
		d.at(0, seen(released("b", 4))).want(Acquiring, Acquire)
		d.at(2*s, ev(k)).want(Standby, Observe)
		// Our own record, if the acquire went through: a new value, aged from scratch.
		d.after(s, seen(held("a", 5))).want(Standby)
		if d.m.Age(d.now) != 0 {
			t.Fatalf("%v: age %v", k, d.m.Age(d.now))
		}
		if _, holding := d.m.Held(); holding {
			t.Fatalf("%v: holding", k)
		}
	}
}

func TestLateAcquireReplyCountsAsUnknown(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 4))).want(Acquiring, Acquire)
	d.at(2*s+1, with(AcquireOK, held("a", 5))).want(Standby, Observe)
}

func TestLeaderRenewsOnCadenceAndStopsAtTheDeadline(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm) // anchored at 0: the acquire's send
	d.wake().want(Leader, Renew)
	if d.now != Instant(tm.Retry) {
		t.Fatalf("first renewal at %v, want retry after the acquire's send", d.now)
	}
	d.after(2*s, with(RenewOK, held("a", 3))).want(Leader) // anchored at 5s
	if a := d.m.LastRenewal(); a != Instant(5*s) {
		t.Fatalf("anchor %v, want the renewal's send", a)
	}
	d.wake().want(Leader, Renew) // 10s
	for d.m.State() == Leader {
		d.after(time.Millisecond, ev(RenewFailed)).want(Leader)
		d.wake()
	}
	// The stop, and another renewal: still holding, it keeps trying.
	d.want(Stopping, StopUnit, Renew).journal(JournalRenewFailed)
	if want := Instant(5*s + tm.Retry + tm.RenewDeadline); d.now != want {
		t.Fatalf("stopped at %v, want %v", d.now, want)
	}
	if d.m.Cause() != CauseRenewFailed {
		t.Fatalf("cause %v", d.m.Cause())
	}
}

func TestLateRenewReplyCountsAsFailed(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.wake().want(Leader, Renew)
	// Failed; the next attempt, due reply_max after the last send, goes at once.
	d.after(tm.ReplyMax+1, with(RenewOK, held("a", 3))).want(Leader, Renew)
	if d.m.LastRenewal() != 0 {
		t.Fatalf("anchor moved to %v on a late reply", d.m.LastRenewal())
	}
}

func TestDeadlineBeatsALateReply(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.wake().want(Leader, Renew)
	// The reply would move the anchor, but the deadline came first.
	d.at(tm.Retry+tm.RenewDeadline, with(RenewOK, held("a", 3))).want(Stopping, StopUnit, Renew).journal(JournalRenewFailed)
	if d.m.LastRenewal() != 0 {
		t.Fatalf("anchor moved to %v", d.m.LastRenewal())
	}
}

func TestLossStopsAtOnceAndNeverReleases(t *testing.T) {
	for _, e := range []Event{with(RenewLost, held("b", 3)), ev(RenewMissing)} {
		d := leader(t, DefaultTiming())
		d.wake().want(Leader, Renew)
		d.after(s, e).want(Stopping, StopUnit).journal(JournalLost)
		d.after(s, ev(UnitStopped)).want(Standby, Observe).journal(JournalStopped)
		if _, holding := d.m.Held(); holding {
			t.Fatalf("%v: still holding", e)
		}
	}
}

func TestUnitFailureStopsReleasesAndBacksOff(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.at(3*s, ev(UnitFailed)).want(Stopping, StopUnit).journal(JournalUnitFailed)
	d.wake().want(Stopping, Renew) // still holding while the unit may run
	d.after(s, with(RenewOK, held("a", 3)))
	d.after(s, ev(UnitStopped)).want(Releasing, Release).journal(JournalStopped)
	if a := d.action(0); !a.Record.Same(held("a", 3)) {
		t.Fatalf("release of %v, want the latest record", a.Record)
	}
	d.after(s, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)
	d.after(s, seen(released("a", 4))).want(Backoff) // not even a released record
	backoffEnd := d.now.Add(-s).Add(d.m.Timing().backoff())
	for d.out.Wake < backoffEnd {
		d.wake().want(Backoff, Observe)
		d.after(0, seen(released("a", 4))).want(Backoff)
	}
	d.wake().want(Standby)
	for d.m.State() == Standby {
		d.wake().want(Standby, Observe)
		d.after(0, seen(released("a", 4)))
	}
	d.want(Acquiring, Acquire)
}

func TestStartFailureStopsReleasesAndBacksOff(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.at(s, with(AcquireOK, held("a", 2))).want(Starting, StartUnit)
	d.after(s, ev(UnitStartFailed)).want(Stopping, StopUnit).journal(JournalUnitFailed)
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	d.after(s, ev(ReleaseFailed)).want(Backoff, Observe).journal("")
}

func TestStopFailedNeverReleasesKeepsRenewingAndRetries(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit).journal(JournalStopping)
	d.at(13*s, ev(UnitStopFailed)).want(StopFailed, Renew).journal(JournalStopFailed) // overdue since 5s
	renewals := 0
	renew := func() {
		if d.has(Release) {
			t.Fatalf("at %v: released after a failed stop", d.now)
		}
		if d.has(Renew) {
			renewals++
			d.after(s, with(RenewOK, held("a", 3)))
		}
	}
	for range 3 { // well past the deadline: still renewing, never releasing
		failedAt := d.now
		for d.m.State() == StopFailed {
			renew()
			d.wake()
		}
		if d.m.State() != Stopping || !d.has(StopUnit) || d.now != failedAt.Add(tm.StopWait) {
			t.Fatalf("at %v: %v, want the stop retried stop_wait after %v", d.now, d.m.State(), failedAt)
		}
		renew()
		d.after(s, ev(UnitStopFailed))
	}
	if renewals < 6 {
		t.Fatalf("%d renewals while stuck", renewals)
	}
	for d.m.State() == StopFailed {
		renew()
		d.wake()
	}
	renew()
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
}

func TestRenewLostDuringAStuckStopForgetsTheLease(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.at(3*s, ev(UnitFailed)).want(Stopping, StopUnit)
	d.at(13*s, ev(UnitStopFailed)).want(StopFailed, Renew)
	d.after(s, with(RenewLost, held("b", 9))).want(StopFailed).journal(JournalLost)
	for d.m.State() == StopFailed {
		d.wake()
	}
	d.want(Stopping, StopUnit)
	d.after(s, ev(UnitStopped)).want(Backoff, Observe) // nothing to release
}

func TestHandoffReleasesForAWaitingPeer(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit).journal(JournalStopping)
	d.after(0, ev(HandoffRequested)).want(Stopping).journal("")
	d.after(s, ev(UnitStopped)).want(Releasing, Release)
	if d.m.Cause() != CauseHandoff {
		t.Fatalf("cause %v", d.m.Cause())
	}
	d.after(s, ev(ReleaseOK)).want(Backoff, Observe).journal(JournalReleased)
}

func TestHandoffRefusedWhereNothingRuns(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, ev(HandoffRequested)).want(Standby).journal(JournalRefused)
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.at(0, ev(HandoffRequested)).want(Acquiring).journal(JournalRefused)
}

func TestHandoffWhileConfirmingReleasesWithoutAStop(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	d.at(0, seen(Absent))
	for d.m.State() == Standby {
		d.wake()
		d.after(0, seen(Absent))
	}
	d.after(s, with(AcquireOK, held("a", 1))).want(Confirming)
	d.after(s, ev(HandoffRequested)).want(Releasing, Release)
}

func TestStopReplacesAnOutstandingStart(t *testing.T) {
	d := booted(t, DefaultTiming())
	d.at(0, seen(released("b", 1))).want(Acquiring, Acquire)
	d.at(s, with(AcquireOK, held("a", 2))).want(Starting, StartUnit)
	d.at(2*s, with(RenewLost, held("b", 3))).want(Starting) // no renewal outstanding: ignored
	d.at(5*s, ev(Tick)).want(Starting, Renew)
	d.at(6*s, with(RenewLost, held("b", 3))).want(Stopping, StopUnit)
	d.after(0, ev(UnitStarted)).want(Stopping) // the replaced start's result
	d.after(0, ev(UnitStartFailed)).want(Stopping)
	d.after(0, ev(UnitFailed)).want(Stopping)
	d.after(s, ev(UnitStopped)).want(Standby, Observe)
}

func TestUnexpectedEventsChangeNothing(t *testing.T) {
	d := leader(t, DefaultTiming())
	before := d.m
	for k := range numEvents + 2 {
		switch k {
		case Tick, UnitFailed, HandoffRequested, Ineligible:
			continue
		}
		d.m = before
		d.at(3*s, Event{Kind: k})
		if d.m.State() != Leader || d.out.Len() != 0 {
			t.Errorf("%v in leader: %v %d actions", k, d.m.State(), d.out.Len())
		}
	}
}

func TestClockNeverGoesBack(t *testing.T) {
	d := leader(t, DefaultTiming())
	d.at(26*s, ev(Tick)).want(Stopping, StopUnit, Renew)
	d.m, d.out = d.m.Step(0, ev(UnitStopped))
	if d.m.now != Instant(26*s) || d.out.Wake <= Instant(26*s) {
		t.Fatalf("now %v wake %v", d.m.now, d.out.Wake)
	}
}

func TestNames(t *testing.T) {
	for i, n := range stateNames {
		if State(i).String() != n {
			t.Errorf("state %d", i)
		}
	}
	if State(99).String() != "state(99)" || EventKind(99).String() != "event(99)" {
		t.Error(State(99), EventKind(99))
	}
	if len(eventNames) != int(numEvents) {
		t.Errorf("%d event names for %d events", len(eventNames), numEvents)
	}
	for _, c := range []struct{ got, want string }{
		{with(RenewLost, held("b", 3)).String(), "renew_lost (held by b at version 3)"},
		{Event{Kind: UnitStopped, Killed: true}.String(), "unit_stopped (killed)"},
		{Action{Kind: Acquire, Record: released("b", 2)}.String(), "acquire (released by b at version 2)"},
		{Action{Kind: Observe}.String(), "observe"},
		{seen(Absent).String(), "observed (missing)"},
		{CauseRenewFailed.String(), "renew_failed"},
		{Never.String(), "never"},
		{Instant(1500 * time.Millisecond).String(), "+1.5s"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}

// A renewal whose reply was lost may still have been applied: the next one
// finds this node's own record at a later version. That is not a loss.
func TestOwnLaterRecordIsNotALoss(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.wake().want(Leader, Renew)
	d.after(tm.ReplyMax, ev(RenewFailed)).want(Leader, Renew) // applied, but the reply was lost
	later := held("a", 3)
	d.after(s, with(RenewLost, later)).want(Leader).journal("")
	if r, holding := d.m.Held(); !holding || !r.Same(later) {
		t.Fatalf("held %v (%t), want the later record", r, holding)
	}
	if d.m.LastRenewal() != 0 {
		t.Fatalf("anchor moved to %v without a successful renewal", d.m.LastRenewal())
	}
	d.wake().want(Leader, Renew)
	if a := d.action(0); !a.Record.Same(later) {
		t.Fatalf("renews %v, want the later record", a.Record)
	}
	// The same holder with another token is someone else: a loss.
	other := held("a", 4)
	other.Token, other.Raw = "another acquisition", other.Raw+"x"
	d.after(s, with(RenewLost, other)).want(Stopping, StopUnit).journal(JournalLost)
}

// The release waits for an outstanding renewal and uses what it wrote.
func TestReleaseWaitsForTheOutstandingRenewal(t *testing.T) {
	tm := DefaultTiming()
	d := leader(t, tm)
	d.at(3*s, ev(HandoffRequested)).want(Stopping, StopUnit)
	d.wake().want(Stopping, Renew)
	d.after(s, ev(UnitStopped)).want(Releasing)
	d.after(s, with(RenewOK, held("a", 3))).want(Releasing, Release)
	if a := d.action(0); !a.Record.Same(held("a", 3)) {
		t.Fatalf("release of %v", a.Record)
	}
}

func TestNudgeObservesNowOnlyWhenObserving(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	d.at(0, seen(held("b", 1))).want(Standby)
	d.after(time.Second, Event{Kind: Nudge}).want(Standby, Observe)
	// A second nudge while the observation is outstanding asks nothing.
	d.after(0, Event{Kind: Nudge}).want(Standby)
	d.after(0, seen(held("b", 1))).want(Standby)
	if d.m.Age(d.now) != time.Second {
		t.Fatalf("a nudge reset the age: %v", d.m.Age(d.now))
	}
}

func TestRenewGridBringsRenewalsForwardOnly(t *testing.T) {
	tm := DefaultTiming()
	m, err := New(Config{Timing: tm, Seed: 1, RenewGrid: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{t: t, m: m}
	d.at(0, ev(Tick)).want(Stopping, StopUnit)
	d.at(0, ev(UnitStopped)).want(Standby, Observe)
	d.at(300*time.Millisecond, seen(released("b", 1))).want(Acquiring, Acquire) // sent at 0.3s
	d.at(s, with(AcquireOK, held("a", 2))).want(Starting, StartUnit)
	d.at(2*s, ev(UnitStarted)).want(Leader)
	d.wake().want(Leader, Renew)
	if d.now != Instant(5*s) {
		t.Fatalf("first renewal at %v, want 5s: 0.3s + retry brought back to the grid", d.now)
	}
	// The deadline still counts from the acquire's send.
	if want := Instant(300*time.Millisecond + tm.Retry + tm.RenewDeadline); d.m.deadline() != want {
		t.Fatalf("deadline %v, want %v", d.m.deadline(), want)
	}
	d.after(100*time.Millisecond, with(RenewOK, held("a", 3))).want(Leader)
	for _, want := range []time.Duration{10 * s, 15 * s} {
		d.wake().want(Leader, Renew)
		if d.now != Instant(want) {
			t.Fatalf("renewal at %v, want %v: exactly retry apart on the grid", d.now, want)
		}
		d.after(100*time.Millisecond, with(RenewOK, held("a", uint64(want/s)))).want(Leader)
	}
	if _, err := New(Config{Timing: tm, RenewGrid: tm.Retry + 1}); err == nil {
		t.Fatal("a grid longer than retry was accepted")
	}
}

// TestStartCarriesTheTenuresToken: the start of a tenure carries its
// fencing token, the version the node acquired at; a later tenure's is
// the version of its own acquisition, larger.
func TestStartCarriesTheTenuresToken(t *testing.T) {
	tm := DefaultTiming()
	d := booted(t, tm)
	d.at(0, seen(released("b", 7))).want(Acquiring, Acquire)
	d.at(time.Millisecond, with(AcquireOK, held("a", 1700000000000))).want(Starting, StartUnit)
	if a := d.action(0); a.Token != 1700000000000 {
		t.Fatalf("start %+v: token %d, want the acquired version", a, a.Token)
	}
}
