package unitctl

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// settings are the properties of a unit that decide whether it can be
// managed, as systemd reports them after applying every file.
type settings struct {
	ID, LoadState, UnitFileState string
	FragmentPath                 string
	DropInPaths                  []string
	WantedBy, RequiredBy         []string
	UpheldBy, TriggeredBy        []string
	BoundBy                      []string
	OnFailureOf, OnSuccessOf     []string
	BindsTo, After               []string
	RefuseManualStart            bool
	RefuseManualStop             bool

	Type                   string
	BusName                string
	RemainAfterExit        bool
	KillMode               string
	SendSIGKILL            bool
	TimeoutStopUSec        uint64
	TimeoutStopFailureMode string // terminate, abort or kill; "" if systemd does not report it (before 246: terminate)
	FinalKillSignal        int32  // 0 if systemd does not report it (before 240: SIGKILL)
	ExecStartPre           []execCommand
	ExecStop               []execCommand
	ExecStopPost           []execCommand
}

// enabledStates are the UnitFileState values of a unit that systemd starts
// on its own at boot.
var enabledStates = []string{"enabled", "enabled-runtime", "linked", "linked-runtime"}

// assess applies the management rules to s. A refusal means the unit is
// not managed; a warning says what the drop-in changes.
func assess(s settings, cfg Config) (refusals, warnings []string) {
	refuse := func(format string, args ...any) { refusals = append(refusals, fmt.Sprintf(format, args...)) }
	if !strings.HasSuffix(s.ID, ".service") {
		refuse("only .service units can be managed")
		return refusals, nil
	}
	if s.LoadState != "loaded" {
		refuse("LoadState=%s: systemd could not load the unit", s.LoadState)
		return refusals, nil
	}
	switch s.KillMode {
	case "control-group", "mixed":
	default:
		refuse("KillMode=%s%s leaves processes of the unit running after a stop; use control-group (or mixed)", s.KillMode, s.setIn("Service", "KillMode"))
	}
	if !s.SendSIGKILL {
		refuse("SendSIGKILL=no%s: a process that ignores SIGTERM would outlive the stop", s.setIn("Service", "SendSIGKILL"))
	}
	if s.Type == "oneshot" && !s.RemainAfterExit {
		refuse("Type=oneshot%s without RemainAfterExit=yes is inactive again once it finished: there is nothing to hold", s.setIn("Service", "Type"))
	}
	for _, r := range []struct {
		key string
		set bool
	}{{"RefuseManualStart", s.RefuseManualStart}, {"RefuseManualStop", s.RefuseManualStop}} {
		if r.set {
			refuse("%s=yes%s: unitlease must start and stop the unit", r.key, s.setIn("Unit", r.key))
		}
	}
	if slices.Contains(enabledStates, s.UnitFileState) {
		refuse("UnitFileState=%s: systemd starts it at boot, before unitlease has written the guard drop-in (it lives in /run and is gone after a reboot), so two copies could run; run systemctl disable %s", s.UnitFileState, s.ID)
	}
	for _, dep := range []struct {
		how   string
		units []string
	}{{"Wants=", s.WantedBy}, {"Requires=", s.RequiredBy}, {"Upholds=", s.UpheldBy}, {"BindsTo=", s.BoundBy},
		{"OnFailure=", s.OnFailureOf}, {"OnSuccess=", s.OnSuccessOf}, {"a trigger", s.TriggeredBy}} {
		if len(dep.units) > 0 {
			refuse("pulled in by %s (%s): they start this unit, at boot without the guard; remove the dependency", strings.Join(dep.units, ", "), dep.how)
		}
	}
	if s.FinalKillSignal != 0 && s.FinalKillSignal != int32(syscall.SIGKILL) {
		refuse("FinalKillSignal=%s%s: systemd's last kill of a stop that timed out would not end a process, which then outlives stop_wait once the daemon is gone; remove it (the default is SIGKILL)", signalName(s.FinalKillSignal), s.setIn("Service", "FinalKillSignal"))
	}
	if s.TimeoutStopFailureMode == "abort" {
		refuse("TimeoutStopFailureMode=abort%s: a stop phase that times out is followed by SIGABRT and a wait of TimeoutAbortSec=, outside the stop budget; use terminate (the default) or kill", s.setIn("Service", "TimeoutStopFailureMode"))
	}
	phases := stopPhases(s)
	if s.BusName != "" {
		refuse("BusName=%s%s: a D-Bus call to that name can activate it, at boot without the guard; remove BusName= (and its D-Bus activation file) to manage it", s.BusName, s.setIn("Service", "BusName"))
	}
	budget := cfg.StopTimeout()
	per := stopPhaseTimeout(cfg, len(phases))
	switch {
	case per < MinStopPhase:
		refuse("its stop has %d phases that systemd bounds one by one with TimeoutStopSec= (%s)%s; within the stop budget %v (stop_wait %v minus the %v kill margin), with up to %v of systemd's timer slack after each phase but the last, each would get %v, below %v: raise stop_wait or use fewer ExecStop=/ExecStopPost= commands",
			len(phases), strings.Join(phases, ", "), s.stopCommandsIn(), budget, cfg.StopWait, KillMargin(cfg.StopWait), systemdTimerSlack, max(per, 0), MinStopPhase)
	case s.TimeoutStopUSec <= uint64(per/time.Microsecond):
	case len(phases) == 1:
		warnings = append(warnings, fmt.Sprintf("TimeoutStopSec=%s exceeds the stop budget %v (stop_wait %v minus the %v kill margin); the drop-in sets TimeoutStopSec=%v",
			formatUSec(s.TimeoutStopUSec), budget, cfg.StopWait, KillMargin(cfg.StopWait), per))
	default:
		hint := ""
		if s.KillMode == "control-group" && len(s.ExecStopPost) == 0 {
			hint = "; with KillMode=mixed the final SIGTERM phase ends at once and the other phases share the budget"
		}
		warnings = append(warnings, fmt.Sprintf("TimeoutStopSec=%s exceeds %v: systemd applies it to each of the %d phases of the stop (%s), and with up to %v of systemd's timer slack after each but the last they must fit the stop budget %v (stop_wait %v minus the %v kill margin); the drop-in sets TimeoutStopSec=%v%s",
			formatUSec(s.TimeoutStopUSec), per, len(phases), strings.Join(phases, ", "), systemdTimerSlack, budget, cfg.StopWait, KillMargin(cfg.StopWait), per, hint))
	}
	return refusals, warnings
}

// systemdTimerSlack is how late systemd's timeout of a stop phase may
// fire: systemd arms it with sd-event's default accuracy, 250ms, and
// sd-event may coalesce the wake-up anywhere within it. Measured in a
// node (systemd 252): 168ms and 250ms late.
const systemdTimerSlack = 250 * time.Millisecond

// MinStopPhase is the shortest TimeoutStopSec= the drop-in sets. A unit
// whose stop phases leave less to each is refused: its commands would be
// killed before they could do anything (and a TimeoutStopSec= of 0 would
// disable the timeout).
const MinStopPhase = 100 * time.Millisecond

// stopPhases lists the phases of a stop that systemd bounds one by one
// with TimeoutStopSec= (each arms the timer anew), in the worst case: every
// ExecStop= command (the next one runs only after the previous exited; one
// that times out ends the list), the SIGTERM phase (KillSignal= to the
// main and control processes, or the whole cgroup), every ExecStopPost=
// command, and the final SIGTERM phase. systemd's SIGKILL phases take
// milliseconds unless a process survives SIGKILL, which no timeout helps.
//
// The final SIGTERM phase waits on the cgroup after a timed-out
// ExecStopPost= command, and, with KillMode=control-group, on whatever
// is left when the main process exits within its SIGTERM phase while
// another process ignores SIGTERM (measured: 3.72s for TimeoutStopSec=2s),
// with or without stop commands. With KillMode=mixed it signals only the
// main and control processes, so it ends at once without ExecStopPost=:
// a mixed unit without stop commands keeps the whole budget for its
// SIGTERM phase.
func stopPhases(s settings) []string {
	var phases []string
	for _, c := range s.ExecStop {
		phases = append(phases, "ExecStop="+c.Path)
	}
	phases = append(phases, "the SIGTERM phase")
	for _, c := range s.ExecStopPost {
		phases = append(phases, "ExecStopPost="+c.Path)
	}
	if len(s.ExecStopPost) > 0 || s.KillMode == "control-group" {
		phases = append(phases, "the final SIGTERM phase")
	}
	return phases
}

// stopPhaseTimeout is the TimeoutStopSec= that fits n phases in the stop
// budget, cfg.StopTimeout(): n timeouts, and systemd's timer slack after
// each but the last (the kill margin left after the budget covers the
// last one's and systemd's SIGKILL), in whole milliseconds. For a single
// phase it is the whole budget.
func stopPhaseTimeout(cfg Config, n int) time.Duration {
	per := (cfg.StopTimeout() - time.Duration(n-1)*systemdTimerSlack) / time.Duration(n)
	return per.Truncate(time.Millisecond)
}

// signalName names a signal number as systemd's settings do.
func signalName(sig int32) string {
	name := unix.SignalName(syscall.Signal(sig))
	if name == "" {
		return fmt.Sprint(sig)
	}
	return name
}

func formatUSec(us uint64) string {
	if us == math.MaxUint64 {
		return "infinity"
	}
	return (time.Duration(us) * time.Microsecond).String()
}
