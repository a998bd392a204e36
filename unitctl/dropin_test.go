package unitctl

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDropInContents(t *testing.T) {
	s := goodService()
	s.KillMode = "mixed"
	s.ExecStartPre = []execCommand{{Path: "/bin/mount-data", Argv: []string{"/bin/mount-data", "--now"}, Flags: []string{"ignore-failure"}}}
	p, err := newPlan(s, Config{StopWait: 10 * time.Second}.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	want := `# Written by unitlease while it manages vpn.service; removed when it stops managing it.
# Do not edit: unitlease rewrites it.
[Unit]
BindsTo=unitlease.service
After=unitlease.service

[Service]
ExecStartPre=
ExecStartPre=+"/usr/bin/unitlease" "guard" %n
ExecStartPre=-"/bin/mount-data" "--now"
TimeoutStopSec=9000ms
KillMode=mixed
SendSIGKILL=yes
`
	if got := string(p.DropIn); got != want {
		t.Errorf("drop-in:\n%s\nwant:\n%s", got, want)
	}
	if got := p.cfg.DropInPath("vpn.service"); got != "/run/systemd/system/vpn.service.d/zz-unitlease.conf" {
		t.Errorf("path %s", got)
	}
	if got := p.cfg.oldDropInPaths("vpn.service"); !slices.Equal(got, []string{"/run/systemd/system/vpn.service.d/50-unitlease.conf"}) {
		t.Errorf("old paths %q", got)
	}
}

// TestDropInNameSortsLast: systemd applies drop-ins in byte order of their
// file names (strcmp), so the drop-in must sort after the names
// administrators give theirs, and after the name it had before.
func TestDropInNameSortsLast(t *testing.T) {
	for _, name := range append([]string{
		"override.conf", "10-limits.conf", "50-unitlease.conf", "90-local.conf", "99-zzz.conf",
		"Override.conf", "local.conf", "memory.conf", "timeout.conf", "zz-local.conf", "zz-b.conf",
	}, oldDropInNames...) {
		if name >= DropInName {
			t.Errorf("%s does not sort before %s", name, DropInName)
		}
	}
	if !strings.HasSuffix(DropInName, ".conf") || strings.HasPrefix(DropInName, ".") {
		t.Errorf("systemd ignores a drop-in named %s", DropInName)
	}
}

func TestRefusedPlan(t *testing.T) {
	s := goodService()
	s.KillMode, s.SendSIGKILL = "none", false
	_, err := newPlan(s, Config{StopWait: 10 * time.Second}.withDefaults())
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrRefused) || len(re.Reasons) != 2 {
		t.Fatalf("got %v, want a RefusedError with two reasons", err)
	}
}

func TestVerify(t *testing.T) {
	cfg := Config{StopWait: 4 * time.Second, DaemonUnit: "d.service"}.withDefaults()
	own := execCommand{Path: "/bin/own", Argv: []string{"/bin/own"}}
	s := goodService()
	s.ExecStartPre = []execCommand{own}
	p, err := newPlan(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	effective := func() settings {
		e := s
		e.DropInPaths = []string{"/etc/systemd/system/vpn.service.d/override.conf", cfg.DropInPath("vpn.service")}
		e.ExecStartPre = []execCommand{p.guardCommand(), own}
		e.TimeoutStopUSec = 1_625_000 // the share of each of 2 phases of the 3.5s budget
		e.BindsTo, e.After = []string{"d.service"}, []string{"basic.target", "d.service"}
		return e
	}
	if err := p.verify(effective()); err != nil {
		t.Fatalf("verify: %v", err)
	}
	breakages := map[string]func(*settings){
		"not loaded":          func(e *settings) { e.DropInPaths = nil },
		"guard not first":     func(e *settings) { e.ExecStartPre[0], e.ExecStartPre[1] = e.ExecStartPre[1], e.ExecStartPre[0] },
		"own command lost":    func(e *settings) { e.ExecStartPre = e.ExecStartPre[:1] },
		"stop timeout raised": func(e *settings) { e.TimeoutStopUSec = 1_625_001 },
		"kill mode changed":   func(e *settings) { e.KillMode = "process" },
		"not bound":           func(e *settings) { e.BindsTo = nil },
	}
	for name, breakIt := range breakages {
		e := effective()
		breakIt(&e)
		if err := p.verify(e); !errors.Is(err, ErrDropIn) {
			t.Errorf("%s: verify = %v, want ErrDropIn", name, err)
		}
	}
	if !strings.Contains(string(p.DropIn), "TimeoutStopSec=1625ms") {
		t.Errorf("drop-in:\n%s", p.DropIn)
	}
}
