package unitctl

import (
	"context"
	"sync"

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
// the jobs.
type jobResults struct {
	mu      sync.Mutex
	waiting map[uint32]chan<- string
	early   map[uint32]string // results no call waited for yet, of the last earlyMax jobs removed
	order   []uint32          // early's ids, oldest first
}

// earlyMax bounds the results kept for jobs no call waits for: systemd
// announces every job's end, other clients' jobs included. A result
// pruned before its call looked is lost, which callers survive: they
// judge from the unit's state when a job is gone without a result.
const earlyMax = 4096

// removed takes a JobRemoved: the waiting call gets its result, or it is
// kept for the call that has yet to look.
func (j *jobResults) removed(id uint32, result string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if ch, ok := j.waiting[id]; ok {
		delete(j.waiting, id)
		ch <- result // buffered, and sent to once
		return
	}
	if j.early == nil {
		j.early = map[uint32]string{}
	}
	if len(j.order) == earlyMax {
		delete(j.early, j.order[0])
		j.order = append(j.order[:0], j.order[1:]...)
	}
	j.early[id] = result
	j.order = append(j.order, id)
}

// expect routes job id's result to ch, which must have room for one: at
// once if it was already removed. Call forget(id) once the result is no
// longer wanted.
func (j *jobResults) expect(id uint32, ch chan<- string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if r, ok := j.early[id]; ok {
		delete(j.early, id)
		ch <- r
		return
	}
	if j.waiting == nil {
		j.waiting = map[uint32]chan<- string{}
	}
	j.waiting[id] = ch
}

// forget drops the wait for job id's result.
func (j *jobResults) forget(id uint32) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.waiting, id)
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

// queueJob calls StartUnit or StopUnit (call, on the connection it is
// given) for unit in mode "replace", and routes the job's result to the
// returned channel; call the returned function once it is no longer
// wanted. Calls that queue starts go at most maxStartCalls at a time:
// a thousand starts waiting on a busy systemd would otherwise exceed the
// bus's pending replies per connection (dbus-daemon's default is 128), and
// each answer would wait behind all of them.
func (s *Systemd) queueJob(ctx context.Context, unit string, start bool) (<-chan string, func(), error) {
	if start {
		select {
		case s.startCalls <- struct{}{}:
			defer func() { <-s.startCalls }()
		case <-ctx.Done():
			return nil, nil, unanswered(ctx, nil)
		}
	}
	var id int
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		if start {
			id, err = c.StartUnitContext(ctx, unit, "replace", nil)
		} else {
			id, err = c.StopUnitContext(ctx, unit, "replace", nil)
		}
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan string, 1)
	s.jobs.expect(uint32(id), ch)
	return ch, func() { s.jobs.forget(uint32(id)) }, nil
}

// maxStartCalls and maxStopCalls bound the StartUnit and StopUnit calls
// waiting for systemd's answer; with the guard's reads (at most the
// control socket's connections, 32) they stay under dbus-daemon's 128.
const (
	maxStartCalls = 32
	maxStopCalls  = 48
)
