package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/unitlease/unitlease/internal/supervisor"
	"github.com/unitlease/unitlease/unitctl"
)

// unitsOf adapts systemd to a supervisor's Units: stops take the
// configured stop_wait, and a stop's SIGKILL is read off unitctl's error.
type unitsOf struct {
	sd       Manager
	stopWait time.Duration
	ucfg     unitctl.Config // where the units' environment files go
}

// Start writes the unit's environment file (the lease, the node, the
// fencing token), which its drop-in names, then starts it. A file it
// cannot write fails the start: the unit would run without its token, or
// with a tenure's before.
func (u *unitsOf) Start(ctx context.Context, unit string, env supervisor.Env) error {
	if err := u.sd.WriteEnv(u.ucfg, unit, env.Pairs()); err != nil {
		return err
	}
	return u.sd.Start(ctx, unit)
}

// StartQueued is Start for a supervisor whose start waits for its turn
// without a goroutine (supervisor.QueuedUnits): over a systemd that
// queues starts (unitctl's line), else on a goroutine of its own.
func (u *unitsOf) StartQueued(ctx context.Context, unit string, env supervisor.Env, done func(error)) {
	if err := u.sd.WriteEnv(u.ucfg, unit, env.Pairs()); err != nil {
		go done(err)
		return
	}
	if q, ok := u.sd.(queuedStarter); ok {
		q.StartQueued(ctx, unit, done)
		return
	}
	go func() { done(u.sd.Start(ctx, unit)) }()
}

// queuedStarter is a Manager whose starts can wait for their turn
// without a goroutine each: *unitctl.Systemd.
type queuedStarter interface {
	StartQueued(ctx context.Context, unit string, done func(error))
}

func (u *unitsOf) StartOrder(ctx context.Context, units []string) ([]string, error) {
	return u.sd.StartOrder(ctx, units)
}

func (u *unitsOf) Stop(ctx context.Context, unit string, queued func()) (bool, error) {
	if queued != nil {
		ctx = unitctl.OnQueued(ctx, queued)
	}
	var killed bool
	ctx = unitctl.OnKilled(ctx, func() { killed = true })
	k, err := killedBy(u.sd.Stop(ctx, unit, u.stopWait))
	return killed || k, err
}

// StopQueued is Stop for a supervisor's stop that no deadline bounds
// (supervisor.QueuedStops): over a systemd whose stops can wait in a
// line (unitctl's StopQueued), else on a goroutine of its own.
func (u *unitsOf) StopQueued(ctx context.Context, unit string, done func(bool, error)) {
	if q, ok := u.sd.(queuedStopper); ok {
		var killed bool // set before done, on its goroutine
		ctx = unitctl.OnKilled(ctx, func() { killed = true })
		q.StopQueued(ctx, unit, u.stopWait, func(err error) {
			k, err := killedBy(err)
			done(killed || k, err)
		})
		return
	}
	go func() { done(u.Stop(ctx, unit, nil)) }()
}

// queuedStopper is a Manager whose stops can wait for their turn without
// a goroutine each: *unitctl.Systemd.
type queuedStopper interface {
	StopQueued(ctx context.Context, unit string, stopWait time.Duration, done func(error))
}

// killedBy is what a stop that ended with err reports: whether SIGKILL
// was sent, as a failed stop's JobError says (a stop that succeeded says
// so through unitctl.OnKilled), and err.
func killedBy(err error) (bool, error) {
	var je *unitctl.JobError
	if errors.As(err, &je) {
		return je.Killed, err
	}
	return false, err
}

// The daemon's supervisors queue their starts and their stops with no
// deadline, over unitctl's lines.
var (
	_ supervisor.QueuedUnits = (*unitsOf)(nil)
	_ supervisor.QueuedStops = (*unitsOf)(nil)
	_ queuedStarter          = (*unitctl.Systemd)(nil)
	_ queuedStopper          = (*unitctl.Systemd)(nil)
)
