package supervisor

import (
	"testing"
	"testing/synctest"
	"time"
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
