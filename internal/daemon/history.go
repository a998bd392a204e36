package daemon

import (
	"context"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
)

// The lease's history as `status` shows it: each release notes why, each
// acquisition notes over whom and why the lease moved, and each node its
// failure count. Written after the fact, off the step, with their own
// bounded context: nothing decides on them, and a write that fails only
// makes status show less.

// historyWait bounds each note's write, from when it was made.
const historyWait = 5 * time.Second

// noteWriters is how many notes are written at once.
const noteWriters = 4

// noteLine is the history notes waiting to be written to Redis (the
// release and transition notes, the failure counts): at most noteWriters
// goroutines write them (a workLine), each note within historyWait of
// when it was made (a note that waited longer fails at once: notes are
// best effort). A goroutine for each note, as before, made 5,000 at once
// when a daemon starting with 5,000 leases acquired them within seconds,
// about 1,850 of them waiting on Redis together, and the runtime keeps
// every goroutine descriptor it ever made (0.9 MB for the process's
// life, in a heap profile).
type noteLine struct{ workLine }

// add puts a note in the line.
func (l *noteLine) add(write func(ctx context.Context)) {
	by := time.Now().Add(historyWait)
	l.workLine.add(noteWriters, func() {
		ctx, cancel := context.WithDeadline(context.Background(), by)
		defer cancel()
		write(ctx)
	})
}

// intend notes why the daemon is about to move lease (drain, failback,
// stop, sleep), for the release note; the cause says the rest.
func (d *Daemon) intend(lease, why string) {
	d.fmu.Lock()
	defer d.fmu.Unlock()
	if d.intents == nil {
		d.intents = map[string]string{}
	}
	d.intents[lease] = why
}

// whyReleased is the reason of a release for c, or the daemon's intent;
// the intent is used once.
func (d *Daemon) whyReleased(lease string, c policy.Cause) string {
	d.fmu.Lock()
	why, ok := d.intents[lease]
	delete(d.intents, lease)
	d.fmu.Unlock()
	if ok && (c == policy.CauseHandoff || c == policy.CauseWithdrawn) {
		return why
	}
	switch c {
	case policy.CauseUnitFailed, policy.CauseStartFailed:
		return "failure"
	case policy.CauseDisabled:
		return "disable"
	}
	return c.String()
}

// released is the supervisor's hook at a release: it notes why.
func (d *Daemon) released(lease string, rec policy.Record, c policy.Cause) {
	why := d.whyReleased(lease, c)
	d.notes.add(func(ctx context.Context) {
		_ = d.store.NoteRelease(ctx, lease, rec.Version, why)
	})
}

// acquired is the supervisor's hook at an acquisition: it notes the
// transition, with why the lease moved: the release note of the record
// this node acquired over, a crash (a held record that stayed unchanged
// for the lease span: its holder stopped renewing), or a missing key.
func (d *Daemon) acquired(lease string, seen, got policy.Record) {
	at := time.Now()
	d.notes.add(func(ctx context.Context) {
		t := redislease.Transition{At: at, From: seen.Holder, To: got.Holder, Token: got.Version}
		switch {
		case !seen.Present:
			t.Why = "missing"
		case seen.Released:
			t.Why = "release"
			if r, err := d.store.LastRelease(ctx, lease); err == nil && r != nil && r.Version == seen.Version && r.By == seen.Holder {
				t.Why = r.Why
			}
		default:
			t.Why = "crash"
		}
		_ = d.store.NoteTransition(ctx, lease, t)
	})
}

// noteFailures tells the cluster this node's failure count for lease
// when it changed since the last note.
func (d *Daemon) noteFailures(lease string) {
	n := d.failCount(lease)
	d.fmu.Lock()
	if d.noted == nil {
		d.noted = map[string]int{}
	}
	same := d.noted[lease] == n
	d.noted[lease] = n
	d.fmu.Unlock()
	if same {
		return
	}
	window := d.settingsFor(lease).Window
	d.notes.add(func(ctx context.Context) {
		_ = d.store.NoteFailures(ctx, lease, n, window)
	})
}
