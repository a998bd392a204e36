package unitctl

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// settings are the properties of a unit that decide whether it can be
// managed, as systemd reports them after applying every file.
type settings struct {
	ID, LoadState, UnitFileState string
	FragmentPath                 string
	DropInPaths                  []string
	WantedBy, RequiredBy         []string
	UpheldBy, TriggeredBy        []string
	BindsTo, After               []string
	RefuseManualStart            bool
	RefuseManualStop             bool

	Type            string
	RemainAfterExit bool
	KillMode        string
	SendSIGKILL     bool
	TimeoutStopUSec uint64
	ExecStartPre    []execCommand
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
		refuse("KillMode=%s leaves processes of the unit running after a stop; use control-group (or mixed)", s.KillMode)
	}
	if !s.SendSIGKILL {
		refuse("SendSIGKILL=no: a process that ignores SIGTERM would outlive the stop")
	}
	if s.Type == "oneshot" && !s.RemainAfterExit {
		refuse("Type=oneshot without RemainAfterExit=yes is inactive again once it finished: there is nothing to hold")
	}
	if s.RefuseManualStart || s.RefuseManualStop {
		refuse("RefuseManualStart= or RefuseManualStop= is set: unitlease must start and stop the unit")
	}
	if slices.Contains(enabledStates, s.UnitFileState) {
		refuse("UnitFileState=%s: systemd starts it at boot, before unitlease has written the guard drop-in (it lives in /run and is gone after a reboot), so two copies could run; run systemctl disable %s", s.UnitFileState, s.ID)
	}
	for _, dep := range []struct {
		how   string
		units []string
	}{{"Wants=", s.WantedBy}, {"Requires=", s.RequiredBy}, {"Upholds=", s.UpheldBy}, {"a trigger", s.TriggeredBy}} {
		if len(dep.units) > 0 {
			refuse("pulled in by %s (%s): starting them starts this unit, at boot without the guard; remove the dependency", strings.Join(dep.units, ", "), dep.how)
		}
	}
	if budget := cfg.StopTimeout(); s.TimeoutStopUSec > uint64(budget/time.Microsecond) {
		warnings = append(warnings, fmt.Sprintf("TimeoutStopSec=%s exceeds the stop budget %v (stop_wait %v minus the %v kill margin); the drop-in sets TimeoutStopSec=%v",
			formatUSec(s.TimeoutStopUSec), budget, cfg.StopWait, KillMargin(cfg.StopWait), budget))
	}
	return refusals, warnings
}

func formatUSec(us uint64) string {
	if us == math.MaxUint64 {
		return "infinity"
	}
	return (time.Duration(us) * time.Microsecond).String()
}
