package unitctl

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// Job results are routed here, not through go-systemd's job channels:
// go-systemd holds one lock of the connection from the call that queues a
// job until systemd's answer names it (so that the job's JobRemoved cannot
// come first), and its signal dispatch takes the same lock for every
// JobRemoved. A systemd slow to answer, busy with a thousand starts, then
// had the daemon's starts and stops queue behind one another, each waiting
// for the last one's answer, and every signal of the connection behind
// them.
//
// Here a job's result is looked up by its id once the call returns: a
// JobRemoved that came first (it is read on the events connection, the
// answer on the other) is kept for a while, so it is found then.

// jobResults routes systemd's JobRemoved signals to the calls that queued
// the jobs. A StartUnit or StopUnit while an equal job is queued is
// merged into it, and answered with its id: every such call gets the
// result.
type jobResults struct {
	mu      sync.Mutex
	waiting map[uint32][]chan<- string
	early   map[uint32]string // the results of the last earlyMax jobs removed that no call waited for
	order   []uint32          // early's ids, oldest first
}

// earlyMax bounds the results kept for jobs no call waits for: systemd
// announces every job's end, other clients' jobs included. A result
// pruned before its call looked is lost, which callers survive: they
// judge from the unit's state when a job is gone without a result.
const earlyMax = 4096

// removed takes a JobRemoved: the waiting calls get its result, or it is
// kept for calls that have yet to look.
func (j *jobResults) removed(id uint32, result string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if chs, ok := j.waiting[id]; ok {
		delete(j.waiting, id)
		for _, ch := range chs {
			ch <- result // each has room for one, and is sent to once
		}
		return
	}
	if j.early == nil {
		j.early = map[uint32]string{}
	}
	if _, ok := j.early[id]; !ok {
		if len(j.order) == earlyMax {
			delete(j.early, j.order[0])
			j.order = append(j.order[:0], j.order[1:]...)
		}
		j.order = append(j.order, id)
	}
	j.early[id] = result
}

// expect routes job id's result to ch, which must have room for one: at
// once if it was already removed (the result stays for another call
// merged into the same job). Call forget(id, ch) once the result is no
// longer wanted.
func (j *jobResults) expect(id uint32, ch chan<- string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r, ok := j.early[id]; ok {
		ch <- r
		return
	}
	if j.waiting == nil {
		j.waiting = map[uint32][]chan<- string{}
	}
	j.waiting[id] = append(j.waiting[id], ch)
}

// forget drops ch's wait for job id's result.
func (j *jobResults) forget(id uint32, ch chan<- string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	chs := slices.DeleteFunc(j.waiting[id], func(c chan<- string) bool { return c == ch })
	if len(chs) == 0 {
		delete(j.waiting, id)
	} else {
		j.waiting[id] = chs
	}
}

// jobRemoved reads systemd's JobRemoved(id, job, unit, result).
func jobRemoved(sig *dbus.Signal) (id uint32, result string, ok bool) {
	if sig.Name != "org.freedesktop.systemd1.Manager.JobRemoved" || len(sig.Body) < 4 {
		return 0, "", false
	}
	id, ok = sig.Body[0].(uint32)
	result, rok := sig.Body[3].(string)
	return id, result, ok && rok
}

// queueJob calls StartUnit or StopUnit for unit in mode "replace", and
// routes the job's result to the returned channel; call the returned
// function once it is no longer wanted. The call holds sl (see detached).
func (s *Systemd) queueJob(ctx context.Context, unit string, start bool, sl *slot) (<-chan string, func(), error) {
	var id int
	err := s.detached(ctx, sl, func(callCtx context.Context, c *sd.Conn) (err error) {
		if start {
			id, err = c.StartUnitContext(callCtx, unit, "replace", nil)
		} else {
			id, err = c.StopUnitContext(callCtx, unit, "replace", nil)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan string, 1)
	s.jobs.expect(uint32(id), ch)
	return ch, func() { s.jobs.forget(uint32(id), ch) }, nil
}

// detached runs op (retried as with does, until ctx ends) and gives up
// one hold of sl once op's last call returned; the caller stops waiting
// when ctx ends. The call itself is not cut short by ctx, only by the
// link's end: dbus-daemon counts a call against the connection until
// systemd answers it, whether or not anyone still waits, and a bound on
// calls that let go of its slots early would not hold.
func (s *Systemd) detached(ctx context.Context, sl *slot, op func(callCtx context.Context, c *sd.Conn) error) error {
	done := make(chan error, 1)
	go func() {
		defer sl.release()
		done <- s.with(ctx, func(c *sd.Conn) error {
			if err := ctx.Err(); err != nil {
				return err // no call made for a caller that gave up, a retry's included
			}
			return op(s.life, c)
		})
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return unanswered(ctx, nil)
	}
}

// A slot is a place in one of the bounded pools of calls to systemd
// (Systemd.startCalls, stopCalls, procCalls, killCalls), given back once
// each of its holders let go.
type slot struct {
	pool    chan struct{}
	holders atomic.Int32
	freed   func() // if not nil, called once the place is given back (line.next)
}

// takeSlot waits for a place in pool, for holders holders.
func takeSlot(ctx context.Context, pool chan struct{}, holders int32) (*slot, error) {
	select {
	case pool <- struct{}{}:
		sl := &slot{pool: pool}
		sl.holders.Store(holders)
		return sl, nil
	case <-ctx.Done():
		return nil, unanswered(ctx, nil)
	}
}

// release lets go of one hold; the last gives the place back.
func (sl *slot) release() {
	if sl.holders.Add(-1) == 0 {
		<-sl.pool
		if sl.freed != nil {
			sl.freed()
		}
	}
}

// The pools' sizes. A start holds its place from its StartUnit call until
// its job ends, or for startSlotHold at most (and until the call has been
// answered): so systemd runs at most maxStarts start jobs of this Systemd
// at once and stays quick to answer (a state read, an operator's
// systemctl), while a unit that takes long to start does not hold up the
// starts behind it. Each start runs the guard, a process of its own, and
// a few starts at a time keep systemd busy: with 32 at once on two cores,
// the daemon's renewals at 5,000 leases went without the CPU to meet
// their deadlines (3,538 renew_failed), with 8 at once at 2,000 still 717
// times; one or two at a time, none. Two fill the gaps one leaves (a
// start's job waits on the guard's process and the daemon's answer, and
// the next start on the job's end): at 2,000 leases the starts took 47 ms
// each with two, against 53 ms with one, in two runs back to back (34 ms
// each for systemd alone starting the same units with a process before
// each, in both). StopUnit,
// GetUnitProcesses and KillUnit calls have pools of their own, so that
// starts never hold up a stop. With the guard's reads of a unit's cgroup
// (at most the control socket's 32 connections), the calls waiting for an
// answer stay within dbus-daemon's default of 128 pending replies per
// connection; past it the bus refuses calls.
//
// maxStopChecks bounds the queued stops (StopQueued) checking at once
// whether their units are stopped already: a state read (batched with
// the others') and a GetUnitProcesses each, so twice maxProcCalls keeps
// that pool busy while the reads come back.
const (
	maxStopChecks = 2 * maxProcCalls
	maxStarts     = 2
	startSlotHold = 2 * time.Second
	maxStopCalls  = 32
	maxProcCalls  = 24
	maxKillCalls  = 24
)
