package unitctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// UnitProcess is one process systemd lists for a unit (GetUnitProcesses):
// one in its cgroup or a cgroup below it, or its main or control process.
type UnitProcess struct {
	Cgroup  string
	PID     uint32
	Command string
}

func (p UnitProcess) String() string {
	return fmt.Sprintf("%d (%s)", p.PID, p.Command)
}

// noSuchUnit is systemd's answer for a unit it has not loaded.
const noSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"

// unitProcesses lists the processes left in unit's cgroup, as systemd's
// Manager.GetUnitProcesses reports them: it reads the cgroup itself, so
// it sees what systemd's state does not say (a unit failed or inactive
// with processes left after its final SIGKILL), and it needs neither
// /sys/fs/cgroup nor /proc, which the daemon's sandbox hides or makes
// read-only. A unit systemd has not loaded has none: systemd does not
// unload a unit whose cgroup still holds a process.
func (s *Systemd) unitProcesses(ctx context.Context, unit string) ([]UnitProcess, error) {
	var procs []UnitProcess
	sl, err := takeSlot(ctx, s.procCalls, 1)
	if err == nil {
		err = s.detached(ctx, sl, func(callCtx context.Context, c *sd.Conn) error {
			return s.listProcesses(callCtx, c, unit, &procs)
		})
	}
	if dbusErrorName(err) == noSuchUnit {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("unitctl: list the processes of %s: %w", unit, err)
	}
	for i := range procs {
		procs[i].Cgroup, procs[i].Command = strings.Clone(procs[i].Cgroup), strings.Clone(procs[i].Command)
	}
	return procs, nil
}

// busOf returns the godbus connection of the link whose go-systemd
// connection is c, for the calls go-systemd does not have. If c's link is
// no longer the current one, the error is one that with retries on the
// next link.
func (s *Systemd) busOf(c *sd.Conn) (*dbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link == nil || s.link.sd != c {
		return nil, dbus.ErrClosed
	}
	return s.link.events, nil
}

// linkOf is the link whose calls go over c, or an error if c is not the
// current one.
func (s *Systemd) linkOf(c *sd.Conn) (*link, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.link == nil || s.link.sd != c {
		return nil, dbus.ErrClosed
	}
	return s.link, nil
}

// dbusErrorName is the D-Bus error name of err, "" if it is none.
func dbusErrorName(err error) string {
	var derr dbus.Error
	if errors.As(err, &derr) {
		return derr.Name
	}
	var pderr *dbus.Error
	if errors.As(err, &pderr) {
		return pderr.Name
	}
	return ""
}

// listProcesses is one GetUnitProcesses call on c.
func (s *Systemd) listProcesses(ctx context.Context, c *sd.Conn, unit string, procs *[]UnitProcess) error {
	bus, err := s.busOf(c)
	if err != nil {
		return err
	}
	systemd := bus.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	call := systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnitProcesses", 0, unit)
	if call.Err != nil {
		return call.Err
	}
	return call.Store(procs)
}
