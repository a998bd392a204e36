package daemon

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/policy"
)

// sleepManager is what the daemon needs of systemd-logind
// (org.freedesktop.login1.Manager) to hand its leases off before the
// machine sleeps: *login1.
type sleepManager interface {
	// Inhibit takes a delay lock on sleep: logind waits until it is
	// closed, or InhibitDelayMaxSec= passed, before the machine sleeps.
	Inhibit(ctx context.Context) (io.Closer, error)
	// PrepareForSleep delivers PrepareForSleep's argument in order: true
	// as the machine is about to sleep, false once it resumed (or the
	// sleep failed). It is closed when the connection to logind ends.
	PrepareForSleep() <-chan bool
	// InhibitDelayMax is logind's InhibitDelayMaxSec=: the longest it
	// waits for a delay lock.
	InhibitDelayMax(ctx context.Context) (time.Duration, error)
}

// watchSleep hands every lease off before the machine sleeps
// (handleSleep), over logind on the system bus, until ctx ends. Where
// logind cannot be reached (a container, a system without it) it logs so
// once at info and returns: a resume is still noticed (watchSuspend), but
// a leader that sleeps through its deadline runs its unit until then.
func (d *Daemon) watchSleep(ctx context.Context) {
	l, err := dialLogind(ctx)
	if err != nil {
		d.sleepUnwatched(err)
		return
	}
	defer l.close()
	d.handleSleep(ctx, l)
}

func (d *Daemon) sleepUnwatched(err error) {
	d.log.Info("logind cannot be reached ("+err.Error()+"): leases are not handed off before the machine sleeps; a resume is still noticed",
		logging.Event, "sleep_unwatched")
}

// handleSleep keeps a delay lock on sleep. On PrepareForSleep(true) it
// withdraws the node from every lease, hands off every lease this node
// holds (relinquishAll: the units stop, are confirmed inactive, and the
// leases are released) and waits out the acquisitions under way, within
// sleepLimit, and only then closes the lock so that the machine sleeps.
// On PrepareForSleep(false) it lets the node compete again, wakes every
// supervisor, then takes a new lock. It returns when ctx ends or the
// signals end, closing the lock.
//
// It does not promise a handoff before every sleep: logind waits at most
// InhibitDelayMaxSec= for the lock (warned about when shorter than a stop
// and a release), a stop that fails keeps its lease held across the
// sleep, and without a lock (the first Inhibit failed: logged once at
// info) there is nothing to wait for.
func (d *Daemon) handleSleep(ctx context.Context, m sleepManager) {
	lock, err := m.Inhibit(ctx)
	if err != nil {
		d.sleepUnwatched(err)
		return
	}
	defer func() {
		if lock != nil {
			lock.Close()
		}
	}()
	if limit, err := m.InhibitDelayMax(ctx); err == nil {
		if w := sleepDelayWarning(limit, d.cfg.Timing); w != "" {
			d.log.Warn(w, logging.Event, "config_warning")
		}
	}
	signals := m.PrepareForSleep()
	defer d.setAsleep(context.WithoutCancel(ctx), false) // no resume will come: compete again
	for {
		var sleeping, ok bool
		select {
		case <-ctx.Done():
			return
		case sleeping, ok = <-signals:
		}
		switch {
		case !ok:
			d.log.Warn("logind: the connection ended: leases are no longer handed off before the machine sleeps", logging.Event, "sleep_unwatched")
			return
		case sleeping:
			d.log.Info("the machine is about to sleep: handing off every lease this node holds", logging.Event, "sleep")
			hctx, cancel := context.WithTimeout(ctx, d.sleepLimit())
			d.setAsleep(hctx, true)
			d.relinquishAll(hctx)
			d.settle(hctx)
			cancel()
			if lock != nil {
				lock.Close()
				lock = nil
			}
		default:
			d.log.Info("the machine resumed: every lease reads its deadline again", logging.Event, "resumed")
			supervisor.Resumed()
			d.setAsleep(ctx, false)
			d.wakeAll()
			if lock == nil {
				if lock, err = m.Inhibit(ctx); err != nil {
					lock = nil
					d.log.Warn("logind: no new sleep inhibitor ("+err.Error()+"): leases are not handed off before the next sleep", logging.Event, "sleep_unwatched")
				}
			}
		}
	}
}

// setAsleep withdraws the node from every lease while the machine sleeps
// (true: a standby acquires nothing, and a lease an acquisition under
// way brings is given back at once, released, its units never started)
// and lets it compete again after the resume (false).
// Peers are told (announce): while asleep the node is announced drained,
// so that no drain, handoff or failback elsewhere releases a lease to it.
func (d *Daemon) setAsleep(ctx context.Context, asleep bool) {
	d.wmu.Lock()
	changed := d.asleep.Swap(asleep) != asleep
	if changed {
		d.withdrawAll(ctx)
	}
	d.wmu.Unlock()
	if changed {
		d.announce(ctx)
	}
}

// settle waits, within ctx, until every supervisor is settled: it holds
// no lease and has nothing under way, no acquisition and no stop (one
// after a lost lease included). A stop that failed is not waited for.
func (d *Daemon) settle(ctx context.Context) {
	for _, s := range d.supervisors() {
		d.waitFor(ctx, func() bool { return settled(s) || stopFailed(s) })
	}
}

// sleepLimit bounds a handoff before sleep: a stop and a release, and
// slack. logind's own limit (InhibitDelayMaxSec=) may be shorter.
func (d *Daemon) sleepLimit() time.Duration {
	t := d.cfg.Timing
	return t.StopWait + 2*t.ReplyMax + time.Second
}

// sleepDelayWarning says what a logind delay limit shorter than a stop and
// a release costs, or "" if it is long enough.
func sleepDelayWarning(limit time.Duration, t policy.Timing) string {
	if need := t.StopWait + t.ReplyMax; limit < need {
		return fmt.Sprintf("logind waits at most %v (InhibitDelayMaxSec=) before the machine sleeps, less than stop_wait %v + reply_max %v: a lease may not be handed off in time; raise InhibitDelayMaxSec= in logind.conf",
			limit, t.StopWait, t.ReplyMax)
	}
	return ""
}

// relinquishAll hands off every lease this node holds at once
// (relinquish) and returns once none is held, or its stop failed, or ctx
// ended. Unlike Shutdown it ends no supervisor: they go on as standbys,
// backing off so that a peer takes the leases.
func (d *Daemon) relinquishAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, r := range d.running() {
		d.intend(r.sup.Lease, "sleep")
		wg.Go(func() { d.relinquish(ctx, r.sup, false) })
	}
	wg.Wait()
}

// login1 is logind over the system bus: a thin adapter of sleepManager,
// tested only where logind runs.
type login1 struct {
	conn *dbus.Conn
	obj  dbus.BusObject
	sigs chan bool
}

const (
	login1Name      = "org.freedesktop.login1"
	login1Path      = "/org/freedesktop/login1"
	login1Interface = "org.freedesktop.login1.Manager"
)

// dialLogind connects to the system bus (closed when ctx ends) and
// subscribes to PrepareForSleep. Signals are delivered in order: a
// resume never overtakes the sleep before it.
func dialLogind(ctx context.Context) (*login1, error) {
	conn, err := dbus.SystemBusPrivate(dbus.WithContext(ctx), dbus.WithSignalHandler(dbus.NewSequentialSignalHandler()))
	if err != nil {
		return nil, err
	}
	// EXTERNAL with the numeric uid, as unitctl: no user name lookup.
	err = conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))})
	if err == nil {
		err = conn.Hello()
	}
	if err == nil {
		err = conn.AddMatchSignalContext(ctx, dbus.WithMatchSender(login1Name), dbus.WithMatchObjectPath(login1Path),
			dbus.WithMatchInterface(login1Interface), dbus.WithMatchMember("PrepareForSleep"))
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	raw := make(chan *dbus.Signal, 16)
	conn.Signal(raw)
	l := &login1{conn: conn, obj: conn.Object(login1Name, login1Path), sigs: make(chan bool)}
	go func() {
		defer close(l.sigs)
		for sig := range raw { // closed by godbus when conn closes
			if sleeping, ok := prepareForSleep(sig); ok {
				select {
				case l.sigs <- sleeping:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return l, nil
}

// prepareForSleep reads logind's PrepareForSleep signal: its argument.
func prepareForSleep(sig *dbus.Signal) (sleeping, ok bool) {
	if sig == nil || sig.Name != login1Interface+".PrepareForSleep" || len(sig.Body) < 1 {
		return false, false
	}
	sleeping, ok = sig.Body[0].(bool)
	return sleeping, ok
}

func (l *login1) Inhibit(ctx context.Context) (io.Closer, error) {
	var fd dbus.UnixFD
	err := l.obj.CallWithContext(ctx, login1Interface+".Inhibit", 0, "sleep", "unitlease", "hand off leases before sleep", "delay").Store(&fd)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "logind sleep inhibitor"), nil
}

func (l *login1) PrepareForSleep() <-chan bool { return l.sigs }

func (l *login1) InhibitDelayMax(ctx context.Context) (time.Duration, error) {
	var us uint64
	err := l.obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, login1Interface, "InhibitDelayMaxUSec").Store(&us)
	if err != nil {
		return 0, err
	}
	if us > math.MaxInt64/uint64(time.Microsecond) {
		return math.MaxInt64, nil // infinity
	}
	return time.Duration(us) * time.Microsecond, nil
}

func (l *login1) close() { l.conn.Close() }
