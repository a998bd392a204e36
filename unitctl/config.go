package unitctl

import (
	"fmt"
	"path/filepath"
	"time"
)

// Config is what every managed unit's drop-in is made from.
type Config struct {
	// StopWait bounds a stop, SIGKILL included (stop_wait). The drop-in
	// sets TimeoutStopSec= to StopWait minus KillMargin(StopWait).
	StopWait time.Duration

	// Guard is the command the drop-in runs as the first ExecStartPre=,
	// with the unit's name appended; it must fail unless this node holds
	// the unit's lease. Default: /usr/bin/unitlease guard.
	Guard []string

	// DaemonUnit is the unit the managed units are bound to (rule 6):
	// when it stops or dies, systemd stops them. Default: unitlease.service.
	DaemonUnit string

	// DropInDir is where runtime drop-ins go. Default: /run/systemd/system.
	DropInDir string
}

// DropInName is the file name of the drop-in. "50-" sorts it after the
// usual "override.conf" and numbered drop-ins below 50, as Pacemaker's
// 50-pacemaker.conf does.
const DropInName = "50-unitlease.conf"

// MinStopWait is the smallest StopWait that leaves room for a SIGTERM
// phase and a SIGKILL phase.
const MinStopWait = time.Second

func (c Config) withDefaults() Config {
	if len(c.Guard) == 0 {
		c.Guard = []string{"/usr/bin/unitlease", "guard"}
	}
	if c.DaemonUnit == "" {
		c.DaemonUnit = "unitlease.service"
	}
	if c.DropInDir == "" {
		c.DropInDir = "/run/systemd/system"
	}
	return c
}

func (c Config) check() error {
	if c.StopWait < MinStopWait {
		return fmt.Errorf("unitctl: stop_wait %v is below %v: there would be no time for SIGTERM before SIGKILL", c.StopWait, MinStopWait)
	}
	if !filepath.IsAbs(c.Guard[0]) {
		return fmt.Errorf("unitctl: guard command %q is not an absolute path", c.Guard[0])
	}
	return nil
}

// KillMargin is how long before stopWait runs out Stop sends SIGKILL to
// the whole cgroup: a tenth of stopWait, at least 500ms, at most half of
// it. After SIGKILL systemd needs milliseconds to see the cgroup empty;
// the margin leaves room for a slow D-Bus round trip and a second kill of
// an ExecStopPost= process.
func KillMargin(stopWait time.Duration) time.Duration {
	m := max(stopWait/10, 500*time.Millisecond)
	return min(m, stopWait/2)
}

// StopTimeout is the TimeoutStopSec= the drop-in sets: systemd's own
// SIGKILL comes at the same moment as Stop's, so either suffices.
func (c Config) StopTimeout() time.Duration {
	return c.StopWait - KillMargin(c.StopWait)
}

// DropInPath is the drop-in file of unit.
func (c Config) DropInPath(unit string) string {
	return filepath.Join(c.withDefaults().DropInDir, unit+".d", DropInName)
}
