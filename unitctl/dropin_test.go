package unitctl

import (
	"errors"
	"os"
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
EnvironmentFile=-/run/unitlease/env/vpn.service.env
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

// TestEnvFile: the environment file's name needs no escaping in a unit
// file, and two units never share one.
func TestEnvFile(t *testing.T) {
	c := Config{}
	for unit, want := range map[string]string{
		"vpn.service":        "/run/unitlease/env/vpn.service.env",
		"getty@tty1.service": "/run/unitlease/env/getty@tty1.service.env",
		`foo\x2dbar.service`: "/run/unitlease/env/foo_5cx2dbar.service.env",
		"a_b.service":        "/run/unitlease/env/a_5fb.service.env",
		"a%b:c.service":      "/run/unitlease/env/a_25b_3ac.service.env",
	} {
		if got := c.EnvFile(unit); got != want {
			t.Errorf("EnvFile(%q) = %s, want %s", unit, got, want)
		}
	}
}

// TestWriteEnv: one NAME=VALUE line per pair, mode 0644, replaced whole;
// a value that would need quoting is refused.
func TestWriteEnv(t *testing.T) {
	c := Config{EnvDir: t.TempDir() + "/env"}
	env := [][2]string{{"UNITLEASE_LEASE", "vpn"}, {"UNITLEASE_NODE", "gw-1"}, {"UNITLEASE_TOKEN", "1796122716151"}}
	if err := WriteEnv(c, "vpn.service", env); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(c.EnvFile("vpn.service"))
	if err != nil || string(data) != "UNITLEASE_LEASE='vpn'\nUNITLEASE_NODE='gw-1'\nUNITLEASE_TOKEN='1796122716151'\n" {
		t.Fatalf("%q %v", data, err)
	}
	if err := WriteEnv(c, "vpn.service", [][2]string{{"X", "a\nY=b"}}); err == nil {
		t.Fatal("a value with a newline was written")
	}
}
