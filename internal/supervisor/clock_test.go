package supervisor

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/policy"
)

// TestCachedOffsetReusesAReadingUntilAResume: readings of the offset are
// reused for OffsetReuse of running time, and never across Resumed, so a
// suspend the daemon noticed is on every clock's next read.
func TestCachedOffsetReusesAReadingUntilAResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reads := 0
		off := Offset{}
		read := cachedOffset(func() (Offset, error) { reads++; return off, nil })
		for range 100 {
			read() // a burst of steps on the renew grid
		}
		if reads != 1 {
			t.Fatalf("%d reads for a burst at one instant, want 1", reads)
		}
		off = Offset{Lo: time.Hour, Hi: time.Hour} // the machine slept
		if o, _ := read(); o.Lo != 0 || reads != 1 {
			t.Fatalf("read %+v after %d reads: want the reading reused", o, reads)
		}
		Resumed()
		if o, _ := read(); o.Lo != time.Hour || reads != 2 {
			t.Fatalf("after Resumed: %+v after %d reads, want the hour read anew", o, reads)
		}
		time.Sleep(OffsetReuse)
		read()
		if reads != 3 {
			t.Fatalf("%d reads: a reading older than OffsetReuse was reused", reads)
		}
	})
}

// TestSupervisorOverdueIsStuck: a supervisor whose wake-up has passed on
// its clock by more than the watchdog allows, without a step (its runtime
// timer did not fire: a starved runtime, or a resume nobody noticed), is
// stuck, so the watchdog stops pinging and systemd kills the daemon,
// whose units BindsTo= then stops. Once it steps, it is not.
func TestSupervisorOverdueIsStuck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := policy.New(policy.Config{Timing: testTiming, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		store, units, off := &fakeStore{t: t}, &fakeUnits{}, &fakeOffset{}
		clock := SuspendClock(off.read)
		s := New("demo", []string{"demo.service"}, "node-a", m, store, units, clock, logging.Text(io.Discard, slog.LevelInfo))
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s.Start(ctx)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		if s.Stuck(clock(), time.Second) {
			t.Fatal("a leader waiting for its next renewal is stuck")
		}
		off.suspend(time.Minute) // the clock runs a minute ahead of the runtime's timers
		if !s.Stuck(clock(), time.Second) {
			t.Fatal("a leader a minute past its wake-up, with no step taken, is not stuck")
		}
		s.Wake()
		synctest.Wait()
		if s.Stuck(clock(), time.Second) {
			t.Fatal("stuck after it stepped")
		}
	})
}
