package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
)

// SuspendCheck is how often the daemon looks for a resume. Its own ticker
// runs on CLOCK_MONOTONIC like every runtime timer, so after a resume it
// fires within one SuspendCheck of the machine running again: that is how
// long a leader whose deadline passed during the suspend may still run
// its unit before it begins to stop, when nothing (logind's sleep
// inhibitor) handed the lease off before the suspend. A check reads
// three clocks and wakes no supervisor unless they moved apart, so its
// cost does not grow with the number of leases; twice a second is no
// more often than a thousand leases' renewals already wake the daemon at
// the default timing (the renew grid: ten instants per 5s retry).
const SuspendCheck = 500 * time.Millisecond

// suspendWatch notices a resume: CLOCK_BOOTTIME moving ahead of
// CLOCK_MONOTONIC, by the time the machine was suspended. It promises
// never to report one that did not happen (a bracket read around a
// preemption only hides a suspend shorter than the preemption), and to
// report one within an interval of running time after the resume. It
// does not see a suspend shorter than the width of its brackets (a few
// microseconds), nor one while a read fails.
type suspendWatch struct {
	read     func() (supervisor.Offset, error) // supervisor.ReadOffset
	interval time.Duration
	resumed  func(slept time.Duration) // at least slept was spent suspended

	last supervisor.Offset // the last reading
	have bool              // last is a reading
}

// newSuspendWatch reads the clocks once: a suspend from here on is seen.
func newSuspendWatch(read func() (supervisor.Offset, error), interval time.Duration, resumed func(time.Duration)) *suspendWatch {
	w := &suspendWatch{read: read, interval: interval, resumed: resumed}
	w.check()
	return w
}

// run checks every interval until ctx ends.
func (w *suspendWatch) run(ctx context.Context) {
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.check()
		}
	}
}

// check reads the clocks and calls resumed if the offset certainly grew
// since the last reading. A failed read changes nothing.
func (w *suspendWatch) check() {
	o, err := w.read()
	if err != nil {
		return
	}
	if w.have && o.GrewFrom(w.last) {
		w.resumed(o.Lo - w.last.Hi)
	}
	w.last, w.have = o, true
}

// watchSuspend wakes every supervisor whenever the machine resumed from a
// suspend, until ctx ends.
func (d *Daemon) watchSuspend(ctx context.Context) {
	newSuspendWatch(supervisor.ReadOffset, SuspendCheck, d.resumed).run(ctx)
}

// resumed logs a resume and wakes every supervisor.
func (d *Daemon) resumed(slept time.Duration) {
	d.log.Info(fmt.Sprintf("the machine was suspended for at least %v: every lease reads its deadline again", slept.Round(time.Millisecond)),
		logging.Event, "resumed")
	supervisor.Resumed() // the clocks read the suspend now, not up to OffsetReuse later
	d.wakeAll()
}

// wakeAll wakes every supervisor (Supervisor.Wake): each whose wake-up
// came while the machine slept steps at once, on its own timer's
// goroutine, and the others' timers are set again on the clock. It
// returns without waiting for any step.
func (d *Daemon) wakeAll() {
	for _, r := range d.running() {
		r.sup.Wake()
	}
}
