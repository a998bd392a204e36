package unitctl

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Config is what every managed unit's drop-in is made from.
type Config struct {
	// StopWait bounds a stop, SIGKILL included (stop_wait). The drop-in
	// shares StopTimeout among the unit's stop phases (stopPhaseTimeout):
	// systemd applies TimeoutStopSec= to each phase anew.
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

	// EnvDir is where each unit's environment file goes (EnvFile): the
	// drop-in names it in EnvironmentFile=, and WriteEnv writes it before
	// every start. Default: /run/unitlease/env.
	EnvDir string
}

// EnvFile is the environment file of unit: EnvDir and the unit's name
// with every byte but letters, digits, '.', '@' and '-' written as _XX
// (hex), so that no name needs escaping in a unit file. A name that would
// come out longer than maxEnvName (a file name has at most 255 bytes,
// and the temporary file WriteEnv renames adds to it) is its SHA-256
// instead: "h_" and 64 hex digits, which no escaped name begins with.
func (c Config) EnvFile(unit string) string {
	var b strings.Builder
	for i := 0; i < len(unit); i++ {
		switch ch := unit[i]; {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '.', ch == '@', ch == '-':
			b.WriteByte(ch)
		default:
			fmt.Fprintf(&b, "_%02x", ch)
		}
	}
	name := b.String()
	if len(name) > maxEnvName {
		sum := sha256.Sum256([]byte(unit))
		name = "h_" + hex.EncodeToString(sum[:])
	}
	return filepath.Join(c.withDefaults().EnvDir, name+".env")
}

// maxEnvName bounds an escaped unit name in EnvFile: with ".env" and the
// temporary file's "." prefix and ".env.tmp-" and ten digits of suffix,
// the longest name stays within 255 bytes.
const maxEnvName = 200

// DropInName is the file name of the drop-in. systemd applies all of a
// unit's drop-ins, from every directory (/etc, /run, /usr/lib, and the
// "service.d" and "PREFIX-.service.d" directories), in the order of their
// file names compared byte by byte, and a setting given later wins. The
// name must sort after those administrators use: "override.conf" (what
// `systemctl edit` writes), numbered "NN-*.conf", and local names, which
// start with a digit or a letter. Digits sort before letters: the earlier
// name "50-unitlease.conf" sorted before "override.conf", whose
// ExecStartPre= and KillMode= then won. "zz-unitlease.conf" sorts after
// all of these; only a name that starts with "zz" ("zzz.conf") or with a
// byte above "z" can sort later ("~" would sort later still, but is
// awkward in a shell; systemd ignores names that start with "." or end in
// "~" or a backup suffix such as ".dpkg-old"). Such a name, or a file of
// the same name in /etc (which hides this one in /run), does not go
// unseen when Install runs: it verifies the settings systemd applies.
const DropInName = "zz-unitlease.conf"

// oldDropInNames are the names earlier versions gave the drop-in. A
// drop-in of an old name lasts in /run until reboot after an upgrade:
// Install and Uninstall remove it, so no stale guard outlives management.
var oldDropInNames = []string{"50-unitlease.conf"}

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
	if c.EnvDir == "" {
		c.EnvDir = "/run/unitlease/env"
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

// StopTimeout is the budget the drop-in shares among a unit's stop
// phases (each gets TimeoutStopSec=, see stopPhaseTimeout): it ends with
// Stop's own SIGKILL, so either suffices.
func (c Config) StopTimeout() time.Duration {
	return c.StopWait - KillMargin(c.StopWait)
}

// DropInPath is the drop-in file of unit.
func (c Config) DropInPath(unit string) string {
	return filepath.Join(c.withDefaults().DropInDir, unit+".d", DropInName)
}

// oldDropInPaths are the files unit's drop-in had under oldDropInNames.
func (c Config) oldDropInPaths(unit string) []string {
	var paths []string
	for _, name := range oldDropInNames {
		paths = append(paths, filepath.Join(c.withDefaults().DropInDir, unit+".d", name))
	}
	return paths
}
