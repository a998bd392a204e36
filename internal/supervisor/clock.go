package supervisor

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/unitlease/unitlease/policy"
)

// Clock reads the node's clock for the policy (rule 5): an
// Instant that never goes back and is not moved by changes to the wall
// clock. A supervisor reads time only through its Clock, so tests inject
// one.
type Clock func() policy.Instant

// BootClock counts from now on CLOCK_BOOTTIME: like CLOCK_MONOTONIC
// it never goes back and ignores the wall clock, and unlike it, it counts
// the time the machine was suspended. A leader whose machine slept
// through its deadline therefore sees the deadline passed on its first
// step after the resume, as its peers, whose clocks ran, do. (Go's own
// monotonic clock, and its timers, run on CLOCK_MONOTONIC, which stands
// still during a suspend.)
//
// It is SuspendClock(ReadOffset): the runtime's monotonic reading plus
// the suspends since. It does not make the runtime's timers count a
// suspend: a timer set before one fires as much later as the suspend was
// long, so after a resume the daemon calls Supervisor.Wake.
func BootClock() Clock { return SuspendClock(cachedOffset(ReadOffset)) }

// OffsetReuse is how long, in the runtime's (running) time, a reading of
// the offset serves later clock reads: the read costs three system calls
// (several microseconds in a sandbox), and at a thousand leases the
// clock is read hundreds of times a second, mostly in bursts on the renew
// grid. A suspend is therefore counted up to OffsetReuse of running time
// late, unless Resumed says one happened: next to the daemon's check for
// a resume (SuspendCheck), it adds nothing to how long a leader may run
// on after one.
const OffsetReuse = 10 * time.Millisecond

// resumes counts the resumes seen (Resumed): a reading taken before the
// last one is not reused.
var resumes atomic.Uint64

// Resumed says that the machine resumed from a suspend: every clock's
// next read reads the offset anew.
func Resumed() { resumes.Add(1) }

// cachedOffset reuses a reading of read for OffsetReuse, and never
// across a Resumed. Readers take the last reading without a lock: at a
// thousand leases the clock is read in bursts on the renew grid, and a
// mutex here was contended. Two readers that find it stale at once both
// read; either reading serves.
func cachedOffset(read func() (Offset, error)) func() (Offset, error) {
	type reading struct {
		o   Offset
		at  time.Time // when o was read
		gen uint64    // resumes when o was read
	}
	var last atomic.Pointer[reading]
	return func() (Offset, error) {
		g := resumes.Load()
		if r := last.Load(); r != nil && r.gen == g && time.Since(r.at) < OffsetReuse {
			return r.o, nil
		}
		o, err := read()
		if err != nil {
			return o, err
		}
		last.Store(&reading{o: o, at: time.Now(), gen: g})
		return o, nil
	}
}

// Offset is a reading of how far CLOCK_BOOTTIME is ahead of
// CLOCK_MONOTONIC: the time the machine spent suspended since boot. Both
// clocks run at the same rate (NTP slews them alike), so only a suspend
// makes the offset grow, and nothing makes it shrink. The two cannot be
// read at one instant, so a reading brackets it: the offset when
// CLOCK_BOOTTIME was read lies within [Lo, Hi], and Hi-Lo is the time
// between the two reads of CLOCK_MONOTONIC around that read (under a few
// microseconds, unless the thread was preempted between them).
type Offset struct{ Lo, Hi time.Duration }

// GrewFrom reports whether the offset certainly grew from earlier to o: a
// suspend happened in between. A wide bracket can hide a suspend shorter
// than its width; nothing else makes it report true.
func (o Offset) GrewFrom(earlier Offset) bool { return o.Lo > earlier.Hi }

// ReadOffset reads CLOCK_MONOTONIC, CLOCK_BOOTTIME and CLOCK_MONOTONIC
// again. It fails only where the kernel lacks CLOCK_BOOTTIME (Linux
// before 2.6.39, which Go does not support).
func ReadOffset() (Offset, error) {
	m1, err := readClock(unix.CLOCK_MONOTONIC)
	if err != nil {
		return Offset{}, err
	}
	b, err := readClock(unix.CLOCK_BOOTTIME)
	if err != nil {
		return Offset{}, err
	}
	m2, err := readClock(unix.CLOCK_MONOTONIC)
	if err != nil {
		return Offset{}, err
	}
	return Offset{Lo: b - m2, Hi: b - m1}, nil
}

func readClock(id int32) (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(id, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// SuspendClock counts from now: the runtime's monotonic clock
// (time.Since, which testing/synctest fakes) plus how much the offset read
// grew since, so with ReadOffset it reads CLOCK_BOOTTIME's progress since
// now. It takes the lower end of each bracket and the upper end of the
// first, so it is never ahead of CLOCK_BOOTTIME, and behind it by no more
// than the width of two brackets; and it keeps the largest growth seen,
// so it never goes back. A read that fails counts no new suspend; if the
// first fails, the clock counts none at all.
//
// The runtime's reading stays the base, rather than CLOCK_BOOTTIME read
// whole, so that a timer set for the time left to a wake-up fires at or
// after it on this clock, as a supervisor's step expects.
func SuspendClock(read func() (Offset, error)) Clock {
	start := time.Now()
	base, err := read()
	if err != nil {
		return func() policy.Instant { return policy.Instant(time.Since(start)) }
	}
	var slept atomic.Int64 // the largest growth seen, at least 0
	return func() policy.Instant {
		if o, err := read(); err == nil {
			grew := int64(o.Lo - base.Hi)
			for {
				cur := slept.Load()
				if grew <= cur || slept.CompareAndSwap(cur, grew) {
					break
				}
			}
		}
		return policy.Instant(time.Since(start)) + policy.Instant(slept.Load())
	}
}
