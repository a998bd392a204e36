package unitctl

import (
	"math"
	"strings"
	"testing"
	"time"
)

// goodService passes every rule with a 10s stop_wait.
func goodService() settings {
	return settings{
		ID: "vpn.service", LoadState: "loaded", UnitFileState: "disabled",
		Type: "simple", KillMode: "control-group", SendSIGKILL: true,
		TimeoutStopUSec: uint64(4 * time.Second / time.Microsecond),
	}
}

func TestAssess(t *testing.T) {
	cfg := Config{StopWait: 10 * time.Second}.withDefaults()
	tests := []struct {
		name    string
		edit    func(*settings)
		refused string // substring of a refusal; "" if accepted
		warned  string // substring of a warning
	}{
		{name: "good", edit: func(*settings) {}},
		{name: "mixed is accepted", edit: func(s *settings) { s.KillMode = "mixed" }},
		{name: "oneshot that remains", edit: func(s *settings) { s.Type, s.RemainAfterExit = "oneshot", true }},
		{name: "static", edit: func(s *settings) { s.UnitFileState = "static" }},
		{name: "not a service", edit: func(s *settings) { s.ID = "vpn.socket" }, refused: "only .service"},
		{name: "not found", edit: func(s *settings) { s.LoadState = "not-found" }, refused: "LoadState=not-found"},
		{name: "masked", edit: func(s *settings) { s.LoadState = "masked" }, refused: "LoadState=masked"},
		{name: "KillMode=process", edit: func(s *settings) { s.KillMode = "process" }, refused: "KillMode=process"},
		{name: "KillMode=none", edit: func(s *settings) { s.KillMode = "none" }, refused: "KillMode=none"},
		{name: "no SIGKILL", edit: func(s *settings) { s.SendSIGKILL = false }, refused: "SendSIGKILL=no"},
		{name: "oneshot", edit: func(s *settings) { s.Type = "oneshot" }, refused: "Type=oneshot"},
		{name: "refuses manual stop", edit: func(s *settings) { s.RefuseManualStop = true }, refused: "RefuseManualStop"},
		{name: "enabled", edit: func(s *settings) { s.UnitFileState = "enabled" }, refused: "systemctl disable vpn.service"},
		{name: "enabled at runtime", edit: func(s *settings) { s.UnitFileState = "enabled-runtime" }, refused: "UnitFileState=enabled-runtime"},
		{name: "wanted", edit: func(s *settings) { s.WantedBy = []string{"multi-user.target"} }, refused: "multi-user.target (Wants=)"},
		{name: "socket activated", edit: func(s *settings) { s.TriggeredBy = []string{"vpn.socket"} }, refused: "vpn.socket (a trigger)"},
		{name: "bound by another", edit: func(s *settings) { s.BoundBy = []string{"app.service"} }, refused: "app.service (BindsTo=)"},
		{name: "started on failure", edit: func(s *settings) { s.OnFailureOf = []string{"backup.service"} }, refused: "backup.service (OnFailure=)"},
		{name: "started on success", edit: func(s *settings) { s.OnSuccessOf = []string{"job.service"} }, refused: "job.service (OnSuccess=)"},
		{name: "bus activated", edit: func(s *settings) { s.BusName = "org.example.Vpn" }, refused: "BusName=org.example.Vpn"},
		{name: "slow stop", edit: func(s *settings) { s.TimeoutStopUSec = uint64(90 * time.Second / time.Microsecond) },
			warned: "TimeoutStopSec=1m30s exceeds 4.375s: systemd applies it to each of the 2 phases of the stop (the SIGTERM phase, the final SIGTERM phase), and with up to 250ms of systemd's timer slack after each but the last they must fit the stop budget 9s (stop_wait 10s minus the 1s kill margin); the drop-in sets TimeoutStopSec=4.375s; with KillMode=mixed the final SIGTERM phase ends at once"},
		{name: "slow stop, mixed", edit: func(s *settings) { s.KillMode, s.TimeoutStopUSec = "mixed", uint64(90*time.Second/time.Microsecond) },
			warned: "TimeoutStopSec=1m30s exceeds the stop budget 9s (stop_wait 10s minus the 1s kill margin); the drop-in sets TimeoutStopSec=9s"},
		{name: "infinite stop", edit: func(s *settings) { s.TimeoutStopUSec = math.MaxUint64 }, warned: "TimeoutStopSec=infinity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodService()
			tt.edit(&s)
			refusals, warnings := assess(s, cfg)
			checkFound(t, "refusal", refusals, tt.refused)
			checkFound(t, "warning", warnings, tt.warned)
		})
	}
}

// checkFound checks that list has exactly one entry containing want, or
// none if want is empty.
func checkFound(t *testing.T, what string, list []string, want string) {
	t.Helper()
	if want == "" {
		if len(list) > 0 {
			t.Errorf("unexpected %ss: %q", what, list)
		}
		return
	}
	if len(list) != 1 || !strings.Contains(list[0], want) {
		t.Errorf("%ss %q, want one containing %q", what, list, want)
	}
}

func TestKillMargin(t *testing.T) {
	for _, tt := range []struct{ wait, margin time.Duration }{
		{time.Second, 500 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond},
		{10 * time.Second, time.Second},
		{60 * time.Second, 6 * time.Second},
	} {
		if got := KillMargin(tt.wait); got != tt.margin {
			t.Errorf("KillMargin(%v) = %v, want %v", tt.wait, got, tt.margin)
		}
	}
}

func TestConfigCheck(t *testing.T) {
	if err := (Config{StopWait: 999 * time.Millisecond}).withDefaults().check(); err == nil || !strings.Contains(err.Error(), "stop_wait 999ms is below 1s") {
		t.Errorf("short stop_wait: %v", err)
	}
	if err := (Config{StopWait: time.Second, Guard: []string{"unitlease", "guard"}}).withDefaults().check(); err == nil {
		t.Error("a relative guard path was accepted")
	}
}
