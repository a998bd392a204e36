package unitctl

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Plan is a unit that passed validation, with the drop-in that makes it
// safe to manage. Install writes it.
type Plan struct {
	Unit     string
	DropIn   []byte   // the contents of DropInPath(Unit)
	Warnings []string // what the drop-in overrides, for the log
	// InEffect, if set, is called once Install (or Recheck) has checked
	// the drop-in in effect, before Install returns: the caller may act
	// on each unit as soon as it is checked, not only once all are. It
	// may be called from several goroutines at once, at most once per
	// Install or Recheck. A unit it was called for may still be
	// among Install's failures if a second reload was needed and the
	// check after it failed.
	InEffect func()

	cfg       Config
	killMode  string
	ownPre    []execCommand // the unit's own ExecStartPre= commands, run after the guard
	stopPhase time.Duration // TimeoutStopSec=: the share of each phase of the stop
}

// newPlan validates s and renders its drop-in.
func newPlan(s settings, cfg Config) (*Plan, error) {
	refusals, warnings := assess(s, cfg)
	if len(refusals) > 0 {
		return nil, &RefusedError{Unit: s.ID, Reasons: refusals}
	}
	p := &Plan{Unit: s.ID, Warnings: warnings, cfg: cfg, killMode: s.KillMode, ownPre: s.ExecStartPre,
		stopPhase: stopPhaseTimeout(cfg, len(stopPhases(s)))}
	dropIn, err := p.render()
	if err != nil {
		return nil, &RefusedError{Unit: s.ID, Reasons: []string{err.Error()}}
	}
	p.DropIn = dropIn
	return p, nil
}

// render writes the drop-in:
//
//   - [Unit] BindsTo= and After= the daemon's unit (rule 6): when
//     the daemon stops, fails or is killed by its watchdog, systemd stops
//     the unit; After= makes that stop come first and a start wait for the
//     daemon. A restart of the daemon stops the unit too: a handover.
//   - ExecStartPre= reset, the guard, then the unit's own ExecStartPre=
//     commands again: the guard runs before anything of the unit.
//   - TimeoutStopSec= the share of each phase of the unit's stop (each
//     ExecStop= command, the SIGTERM phase, each ExecStopPost= command, the
//     final SIGTERM phase: systemd applies the timeout to each anew), so
//     that their sum fits stop_wait and systemd alone stops the unit in
//     time once the daemon is gone (stopPhases, stopPhaseTimeout).
//   - KillMode= and SendSIGKILL= pinned to the validated values, so a later
//     edit of the unit file cannot weaken them without a new validation.
//   - EnvironmentFile= the unit's file in EnvDir (WriteEnv): the lease,
//     the node and the fencing token of the tenure it runs in.
func (p *Plan) render() ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Written by unitlease while it manages %s; removed when it stops managing it.\n", p.Unit)
	fmt.Fprintf(&b, "# Do not edit: unitlease rewrites it.\n")
	fmt.Fprintf(&b, "[Unit]\nBindsTo=%s\nAfter=%s\n\n", p.cfg.DaemonUnit, p.cfg.DaemonUnit)
	fmt.Fprintf(&b, "[Service]\nExecStartPre=\nExecStartPre=%s\n", p.guardLine())
	for _, cmd := range p.ownPre {
		line, err := renderExec(cmd)
		if err != nil {
			return nil, fmt.Errorf("cannot re-render ExecStartPre=%s after the guard: %w", cmd.Path, err)
		}
		fmt.Fprintf(&b, "ExecStartPre=%s\n", line)
	}
	// EnvFile's name needs no escaping. Optional ("-"): the daemon writes
	// it before every start it makes, and fails the start if it cannot;
	// the guard refuses every other start.
	fmt.Fprintf(&b, "EnvironmentFile=-%s\n", p.cfg.EnvFile(p.Unit))
	fmt.Fprintf(&b, "TimeoutStopSec=%dms\n", p.stopPhase.Milliseconds())
	fmt.Fprintf(&b, "KillMode=%s\nSendSIGKILL=yes\n", p.killMode)
	return b.Bytes(), nil
}

// guardLine is the guard's ExecStartPre= value: "+" runs it with full
// privileges whatever User= and sandboxing the unit has; systemd expands
// %n to the unit's name.
func (p *Plan) guardLine() string {
	line := "+"
	for _, w := range p.cfg.Guard {
		line += quoteWord(w) + " "
	}
	return line + "%n"
}

// guardCommand is the guard as systemd reports it once loaded.
func (p *Plan) guardCommand() execCommand {
	argv := append(slices.Clone(p.cfg.Guard), p.Unit)
	return execCommand{Path: p.cfg.Guard[0], Argv: argv, Flags: []string{"privileged"}}
}

// verify checks that systemd applies the drop-in as written: a drop-in
// that sorts later, or a file that failed to load, would leave the unit
// unsafe. The error is a *DropInError; each problem names the file and
// line that set the value systemd applies (see setIn). s is what
// readInEffect reads: of the Unit interface only the properties of
// inEffectUnitProps (a check of another one, the unit's Id say, needs it
// added there; TestNodeInEffectRead compares the verdicts), and every
// Service property.
func (p *Plan) verify(s settings) error {
	path := p.cfg.DropInPath(p.Unit)
	e := &DropInError{Unit: p.Unit, Path: path, Applied: slices.Contains(s.DropInPaths, path)}
	if _, err := os.Stat(path); err == nil {
		e.OnDisk = true
	}
	bad := func(format string, args ...any) { e.Problems = append(e.Problems, fmt.Sprintf(format, args...)) }
	if !e.Applied {
		bad("systemd does not list %s among its drop-ins: %s", path, notApplied(s, path, e.OnDisk))
	}
	want := append([]execCommand{p.guardCommand()}, p.ownPre...)
	if !slices.EqualFunc(s.ExecStartPre, want, sameExec) {
		bad("ExecStartPre= is %s%s, want the guard and then the unit's own %d command(s)",
			describeExecs(s.ExecStartPre), paren(s.listIn("Service", "ExecStartPre")), len(p.ownPre))
	}
	// The phases systemd applies now: a drop-in that sorts later may have
	// added ExecStop= or ExecStopPost= commands, each one more phase.
	phases := stopPhases(s)
	if limit := min(p.stopPhase, stopPhaseTimeout(p.cfg, len(phases))); limit < MinStopPhase {
		bad("the %d phases of the stop (%s)%s do not fit the stop budget %v", len(phases), strings.Join(phases, ", "), s.stopCommandsIn(), p.cfg.StopTimeout())
	} else if s.TimeoutStopUSec > uint64(limit/time.Microsecond) {
		bad("TimeoutStopSec=%s%s exceeds %v, the share of each of the %d phases of the stop (%s)%s", formatUSec(s.TimeoutStopUSec), s.setIn("Service", "TimeoutStopSec", "TimeoutSec"),
			limit, len(phases), strings.Join(phases, ", "), s.stopCommandsIn())
	}
	if s.FinalKillSignal != 0 && s.FinalKillSignal != int32(syscall.SIGKILL) {
		bad("FinalKillSignal=%s%s, want SIGKILL", signalName(s.FinalKillSignal), s.setIn("Service", "FinalKillSignal"))
	}
	if s.TimeoutStopFailureMode == "abort" {
		bad("TimeoutStopFailureMode=abort%s, want terminate or kill", s.setIn("Service", "TimeoutStopFailureMode"))
	}
	if s.KillMode != p.killMode {
		bad("KillMode=%s%s, want %s", s.KillMode, s.setIn("Service", "KillMode"), p.killMode)
	}
	if !s.SendSIGKILL {
		bad("SendSIGKILL=no%s, want yes", s.setIn("Service", "SendSIGKILL"))
	}
	if !slices.Contains(s.BindsTo, p.cfg.DaemonUnit) || !slices.Contains(s.After, p.cfg.DaemonUnit) {
		bad("not bound to and ordered after %s", p.cfg.DaemonUnit)
	}
	if len(e.Problems) > 0 {
		return e
	}
	return nil
}

// notApplied says why systemd does not apply the drop-in at path.
func notApplied(s settings, path string, onDisk bool) string {
	for _, d := range s.DropInPaths {
		if filepath.Base(d) == filepath.Base(path) {
			return fmt.Sprintf("%s, of the same name, hides it", d)
		}
	}
	if onDisk {
		return "it is on disk, but systemd has not read it since it was written (no daemon-reload since)"
	}
	return "it is not on disk"
}

// DropInPath is the file of the plan's drop-in.
func (p *Plan) DropInPath() string { return p.cfg.DropInPath(p.Unit) }

// DaemonUnit is the unit the plan's drop-in binds the unit to.
func (p *Plan) DaemonUnit() string { return p.cfg.DaemonUnit }

// Protections says what the drop-in enforces, for a report.
func (p *Plan) Protections() string {
	return fmt.Sprintf("the guard runs first, BindsTo= and After= %s, KillMode=%s, SendSIGKILL=yes, TimeoutStopSec=%v",
		p.cfg.DaemonUnit, p.killMode, p.stopPhase)
}

func describeExecs(cmds []execCommand) string {
	var words []string
	for _, c := range cmds {
		words = append(words, fmt.Sprintf("%q%v", c.Path, c.Flags))
	}
	return fmt.Sprint(words)
}
