package unitctl

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// Options configure a Systemd.
type Options struct {
	// Private talks to systemd over its private socket
	// (/run/systemd/private, root only) instead of the system bus. It
	// needs no dbus-daemon, but systemd drops the connection on every
	// re-exec; Systemd re-dials. By default the system bus is used, and
	// the private socket only if the bus cannot be reached (as root).
	Private bool

	// PollInterval is how often a wait re-reads the unit's state even
	// without an event (a backstop: JobRemoved may never arrive,
	// coreos/fleet#903). Default 1s.
	PollInterval time.Duration

	// Logf receives reconnects and retried errors. Default: discard.
	Logf func(format string, args ...any)
}

// Systemd controls units over D-Bus. Every method may be called from any
// goroutine. A lost connection (D-Bus NoReply, a daemon-reexec, a closed
// socket) is re-dialled with a bounded backoff and the state re-read; it
// is never reported as a result.
type Systemd struct {
	opts Options

	mu        sync.Mutex
	link      *link // nil until dialled, or after it was found broken
	closed    bool
	dialled   bool       // a link was made before: the next one is a reconnect
	dialMu    sync.Mutex // one dial at a time
	intents   map[string]intentAt
	intentGen uint64 // intents set so far

	killSignal int32 // SIGKILL; tests swap in a harmless signal to play an unkillable process
	// noAllFail: systemd refused the kill target all-fail (it is older
	// than 252); SIGKILLs go out with all.
	noAllFail atomic.Bool

	watchers watchers
	reloads  reloads
	reads    stateReads
	jobs     jobResults
	// The pools of calls to systemd (slot): starts, StopUnit,
	// GetUnitProcesses and KillUnit calls; and the queued stops' checks
	// (StopQueued).
	startCalls, stopCalls, procCalls, killCalls, checkCalls chan struct{}
	starts                                                  line            // the starts waiting for a place in startCalls: its only way in
	checks                                                  line            // the queued stops waiting for a place in checkCalls
	life                                                    context.Context // the links' context: godbus closes a connection when it ends
	done                                                    context.CancelFunc
}

// Dial connects to systemd and subscribes to its unit events.
func Dial(ctx context.Context, opts Options) (*Systemd, error) {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	s := &Systemd{
		opts:       opts,
		intents:    map[string]intentAt{},
		killSignal: int32(syscall.SIGKILL),
		watchers:   watchers{},
		reloads:    reloads{set: map[chan struct{}]bool{}},
		startCalls: make(chan struct{}, maxStarts),
		stopCalls:  make(chan struct{}, maxStopCalls),
		procCalls:  make(chan struct{}, maxProcCalls),
		killCalls:  make(chan struct{}, maxKillCalls),
		checkCalls: make(chan struct{}, maxStopChecks),
	}
	s.starts.pool, s.starts.holders = s.startCalls, 2
	s.checks.pool, s.checks.holders = s.checkCalls, 1
	s.life, s.done = context.WithCancel(context.Background())
	if _, err := s.connection(ctx); err != nil {
		s.done()
		return nil, err
	}
	if err := s.checkVersion(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// MinSystemd is the oldest systemd unitctl works with: from 247 on,
// systemd keeps the cgroup of a stopped unit that a process outlived
// (before, it let go of it, and a unit failed with a process left listed
// none), which Stop's check that no process is left relies on.
const MinSystemd = 247

// checkVersion refuses a systemd older than MinSystemd. A version it
// cannot read as a number is let through: Stop still confirms what the
// cgroup holds as far as systemd reports it.
func (s *Systemd) checkVersion(ctx context.Context) error {
	var v string
	if err := s.with(ctx, func(c *sd.Conn) (err error) {
		v, err = c.GetManagerProperty("Version")
		return err
	}); err != nil {
		return fmt.Errorf("unitctl: reading systemd's version: %w", err)
	}
	n, ok := systemdMajor(v)
	if ok && n < 252 {
		s.noAllFail.Store(true) // all-fail came with 252
	}
	if ok && n < MinSystemd {
		return fmt.Errorf("unitctl: systemd %d is older than %d: it forgets the cgroup of a unit a process outlived, so a stop could not be confirmed complete", n, MinSystemd)
	}
	return nil
}

// systemdMajor reads the leading number of systemd's Version property as
// go-systemd renders it (a quoted string such as "252.39-1~deb12u1").
func systemdMajor(v string) (int, bool) {
	v = strings.Trim(v, `"`)
	i := 0
	for i < len(v) && v[i] >= '0' && v[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(v[:i])
	return n, err == nil
}

// Close closes the connections. Waits in progress end with ErrClosed or
// their context's error.
func (s *Systemd) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.done()
	if s.link != nil {
		s.link.close()
		s.link = nil
	}
	return nil
}

// connection returns the current link, dialling a new one if there is
// none or it broke.
func (s *Systemd) connection(ctx context.Context) (*link, error) {
	s.dialMu.Lock()
	defer s.dialMu.Unlock()
	s.mu.Lock()
	l, closed := s.link, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if l != nil && l.connected() {
		return l, nil
	}
	l, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		l.close()
		return nil, ErrClosed
	}
	if s.link != nil {
		s.link.close()
	}
	reconnect := s.dialled
	if reconnect {
		s.opts.Logf("unitctl: reconnected to systemd")
	}
	s.link, s.dialled = l, true
	go s.pump(l)
	s.watchers.resyncAll() // events may have been lost while disconnected
	if reconnect {
		s.reloads.notify() // a re-exec reloads units too
	}
	return l, nil
}

// forget drops l if it is still the current link and has broken, so that
// the next call dials again.
func (s *Systemd) forget(l *link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link == l && !l.connected() {
		l.close()
		s.link = nil
	}
}

// pump fans the unit events of one link out to the watchers, and job
// results to the calls that queued the jobs, until the
// link closes; then the watchers re-read, as events may have been missed
// before the next link subscribes.
func (s *Systemd) pump(l *link) {
	for sig := range l.signals {
		if unit, props, ok := unitChange(sig); ok {
			s.watchers.deliver(unit, props, s.generation())
		} else if id, result, ok := jobRemoved(sig); ok {
			s.jobs.removed(id, result)
		} else if reloaded(sig) {
			s.reloads.notify()
		}
	}
	s.watchers.resyncAll()
}
