package unitctl

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func execOf(path string) execCommand { return execCommand{Path: path, Argv: []string{path}} }

// TestStopPhases: the phases systemd bounds one by one, and the share of
// the stop budget each gets, so that their sum with systemd's timer slack
// fits stop_wait.
func TestStopPhases(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(*settings)
		wait     time.Duration
		phases   string
		perPhase time.Duration
	}{
		{"plain", func(*settings) {}, 10 * time.Second, "the SIGTERM phase, the final SIGTERM phase", 4375 * time.Millisecond},
		{"plain, mixed", func(s *settings) { s.KillMode = "mixed" }, 2 * time.Second, "the SIGTERM phase", 1500 * time.Millisecond},
		{"ExecStop", func(s *settings) { s.ExecStop = []execCommand{execOf("/bin/stop")} }, 2 * time.Second,
			"ExecStop=/bin/stop, the SIGTERM phase, the final SIGTERM phase", 333 * time.Millisecond},
		{"ExecStop, mixed", func(s *settings) { s.ExecStop, s.KillMode = []execCommand{execOf("/bin/stop")}, "mixed" }, 2 * time.Second,
			"ExecStop=/bin/stop, the SIGTERM phase", 625 * time.Millisecond},
		{"ExecStopPost, mixed", func(s *settings) { s.ExecStopPost, s.KillMode = []execCommand{execOf("/bin/post")}, "mixed" }, 10 * time.Second,
			"the SIGTERM phase, ExecStopPost=/bin/post, the final SIGTERM phase", 2833 * time.Millisecond},
		{"two of each", func(s *settings) {
			s.ExecStop = []execCommand{execOf("/bin/a"), execOf("/bin/b")}
			s.ExecStopPost = []execCommand{execOf("/bin/c"), execOf("/bin/d")}
		}, 10 * time.Second, "ExecStop=/bin/a, ExecStop=/bin/b, the SIGTERM phase, ExecStopPost=/bin/c, ExecStopPost=/bin/d, the final SIGTERM phase", 1291 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodService()
			tt.edit(&s)
			cfg := Config{StopWait: tt.wait}.withDefaults()
			phases := stopPhases(s)
			if got := strings.Join(phases, ", "); got != tt.phases {
				t.Errorf("phases %q, want %q", got, tt.phases)
			}
			per := stopPhaseTimeout(cfg, len(phases))
			if per != tt.perPhase {
				t.Errorf("per phase %v, want %v", per, tt.perPhase)
			}
			if sum := time.Duration(len(phases))*per + time.Duration(len(phases)-1)*systemdTimerSlack; sum > cfg.StopTimeout() {
				t.Errorf("%d phases of %v and the slack between them take %v, more than the budget %v", len(phases), per, sum, cfg.StopTimeout())
			}
		})
	}
}

// TestStopPhasesFitEveryBudget: for every stop_wait and every number of
// phases the drop-in accepts, the phases, each running to its timeout
// and late by systemd's whole timer slack, and systemd's SIGKILL fit
// within stop_wait.
func TestStopPhasesFitEveryBudget(t *testing.T) {
	for wait := MinStopWait; wait <= 2*time.Minute; wait += 50 * time.Millisecond {
		cfg := Config{StopWait: wait}.withDefaults()
		for n := 1; n <= 40; n++ {
			per := stopPhaseTimeout(cfg, n)
			if per < MinStopPhase {
				break
			}
			if worst := time.Duration(n) * (per + systemdTimerSlack); worst > wait-KillMargin(wait)/2 {
				t.Fatalf("stop_wait %v, %d phases of %v: %v with the slack, leaving less than half the kill margin for the SIGKILL", wait, n, per, worst)
			}
		}
	}
}

func TestAssessStopPhases(t *testing.T) {
	tests := []struct {
		name    string
		wait    time.Duration
		edit    func(*settings)
		refused string
		warned  string
	}{
		{name: "ExecStop", wait: 10 * time.Second, edit: func(s *settings) { s.ExecStop = []execCommand{execOf("/bin/stop")} },
			warned: "TimeoutStopSec=4s exceeds 2.833s: systemd applies it to each of the 3 phases of the stop (ExecStop=/bin/stop, the SIGTERM phase, the final SIGTERM phase), and with up to 250ms of systemd's timer slack after each but the last they must fit the stop budget 9s (stop_wait 10s minus the 1s kill margin); the drop-in sets TimeoutStopSec=2.833s"},
		{name: "ExecStop within its share", wait: 10 * time.Second, edit: func(s *settings) {
			s.ExecStop, s.TimeoutStopUSec = []execCommand{execOf("/bin/stop")}, 2_000_000
		}},
		{name: "too many phases for stop_wait", wait: time.Second, edit: func(s *settings) { s.ExecStop = []execCommand{execOf("/bin/stop")} },
			refused: "its stop has 3 phases that systemd bounds one by one with TimeoutStopSec= (ExecStop=/bin/stop, the SIGTERM phase, the final SIGTERM phase); within the stop budget 500ms (stop_wait 1s minus the 500ms kill margin), with up to 250ms of systemd's timer slack after each phase but the last, each would get 0s, below 100ms"},
		{name: "FinalKillSignal", wait: 10 * time.Second, edit: func(s *settings) { s.FinalKillSignal = 3 }, refused: "FinalKillSignal=SIGQUIT"},
		{name: "FinalKillSignal=SIGKILL", wait: 10 * time.Second, edit: func(s *settings) { s.FinalKillSignal = 9 }},
		{name: "abort", wait: 10 * time.Second, edit: func(s *settings) { s.TimeoutStopFailureMode = "abort" }, refused: "TimeoutStopFailureMode=abort"},
		{name: "kill", wait: 10 * time.Second, edit: func(s *settings) { s.TimeoutStopFailureMode = "kill" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := goodService()
			tt.edit(&s)
			refusals, warnings := assess(s, Config{StopWait: tt.wait}.withDefaults())
			checkFound(t, "refusal", refusals, tt.refused)
			if tt.refused == "" {
				checkFound(t, "warning", warnings, tt.warned)
			}
		})
	}
}

// TestDropInStopPhases: the drop-in of a unit with stop commands sets the
// share of each phase, and verification fails when the effective
// settings add a phase, raise the timeout, or weaken the final kill.
func TestDropInStopPhases(t *testing.T) {
	cfg := Config{StopWait: 2 * time.Second, DaemonUnit: "d.service"}.withDefaults()
	s := goodService()
	s.ExecStop = []execCommand{execOf("/bin/stop")}
	p, err := newPlan(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(p.DropIn), "\nTimeoutStopSec=333ms\n") {
		t.Errorf("drop-in:\n%s\nwant TimeoutStopSec=333ms", p.DropIn)
	}
	effective := func() settings {
		e := s
		e.DropInPaths = []string{cfg.DropInPath("vpn.service")}
		e.ExecStartPre = []execCommand{p.guardCommand()}
		e.TimeoutStopUSec, e.FinalKillSignal, e.TimeoutStopFailureMode = 333_000, 9, "terminate"
		e.BindsTo, e.After = []string{"d.service"}, []string{"d.service"}
		return e
	}
	if err := p.verify(effective()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	breakages := map[string]func(*settings){
		"ExecStopPost added":   func(e *settings) { e.ExecStopPost = []execCommand{execOf("/bin/post")} },
		"ExecStop added":       func(e *settings) { e.ExecStop = append(e.ExecStop, execOf("/bin/more")) },
		"stop timeout raised":  func(e *settings) { e.TimeoutStopUSec = 333_001 },
		"final kill weakened":  func(e *settings) { e.FinalKillSignal = 3 },
		"abort on timeout":     func(e *settings) { e.TimeoutStopFailureMode = "abort" },
		"infinite TimeoutStop": func(e *settings) { e.TimeoutStopUSec = 1<<64 - 1 },
	}
	for name, breakIt := range breakages {
		e := effective()
		breakIt(&e)
		if err := p.verify(e); !errors.Is(err, ErrDropIn) {
			t.Errorf("%s: verify = %v, want ErrDropIn", name, err)
		}
	}
}
