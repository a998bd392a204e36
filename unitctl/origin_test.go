package unitctl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFiles writes files (a path relative to dir to its text) and
// returns their paths, relative names resolved.
func writeFiles(t *testing.T, dir string, files map[string]string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths[name] = p
	}
	return paths
}

// TestVerifyNamesTheFile: a defeated protection is reported with the file
// and line that set the value systemd applies, read from the unit's files
// in systemd's order: the last assignment wins, so a later drop-in
// overrides an earlier one, and an empty assignment resets a list.
func TestVerifyNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{StopWait: 4 * time.Second, DaemonUnit: "d.service", DropInDir: filepath.Join(dir, "run")}.withDefaults()
	own := execOf("/bin/own")
	s := goodService()
	s.ExecStartPre = []execCommand{own}
	p, err := newPlan(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := writeFiles(t, dir, map[string]string{
		"lib/vpn.service": "[Unit]\nDescription=VPN\n\n[Service]\nExecStartPre=/bin/own\nExecStart=/bin/vpn \\\n  --foreground\nKillMode=mixed\n",
		"etc/vpn.service.d/override.conf": "# systemctl edit\n[Service]\nExecStartPre=\nKillMode=process\n" +
			"[X-UnitLease]\nKillMode=none\n",
		"etc/vpn.service.d/zzz-local.conf": "[Unit]\nSendSIGKILL=yes\n[Service]\nExecStartPre=\nExecStartPre=/bin/early\n" +
			"SendSIGKILL=no\nFinalKillSignal=SIGQUIT\nTimeoutStopSec=\n",
	})
	if err := writeAtomic(cfg.DropInPath("vpn.service"), p.DropIn); err != nil {
		t.Fatal(err)
	}
	override, local, ours := f["etc/vpn.service.d/override.conf"], f["etc/vpn.service.d/zzz-local.conf"], cfg.DropInPath("vpn.service")

	// Without unitlease's drop-in, override.conf's KillMode=process wins
	// over the fragment's KillMode=mixed, and its empty ExecStartPre=
	// leaves the list empty.
	e := s
	e.FragmentPath, e.DropInPaths = f["lib/vpn.service"], []string{override}
	e.ExecStartPre, e.KillMode = nil, "process"
	err = p.verify(e)
	if !errors.Is(err, ErrDropIn) {
		t.Fatalf("verify without the drop-in = %v, want ErrDropIn", err)
	}
	for _, want := range []string{
		"KillMode=process (set in " + override + ":4), want control-group",
		"(emptied in " + override + ":3)",
		"systemd does not list " + ours + " among its drop-ins",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("verify without the drop-in:\n%v\nwant it to contain %q", err, want)
		}
	}

	// With unitlease's drop-in and a drop-in that sorts after it.
	e = s
	e.FragmentPath, e.DropInPaths = f["lib/vpn.service"], []string{override, ours, local}
	e.ExecStartPre = []execCommand{execOf("/bin/early")}
	e.SendSIGKILL, e.FinalKillSignal = false, 3
	e.TimeoutStopUSec = uint64(90 * time.Second / time.Microsecond)
	e.BindsTo, e.After = []string{"d.service"}, []string{"d.service"}
	err = p.verify(e)
	if !errors.Is(err, ErrDropIn) {
		t.Fatalf("verify with a later drop-in = %v, want ErrDropIn", err)
	}
	for _, want := range []string{
		"(emptied in " + local + ":4, then set in " + local + ":5)",
		"SendSIGKILL=no (set in " + local + ":6)",
		"FinalKillSignal=SIGQUIT (set in " + local + ":7)",
		"TimeoutStopSec=1m30s (reset to the default in " + local + ":8)",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("verify with a later drop-in:\n%v\nwant it to contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "KillMode") {
		t.Errorf("verify with a later drop-in reports KillMode, which unitlease's drop-in pins:\n%v", err)
	}
}

// TestRefusalNamesTheFile: a refusal for a setting of the unit's own
// files names the file and line that set it.
func TestRefusalNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	f := writeFiles(t, dir, map[string]string{
		"vpn.service":                 "[Service]\nExecStart=/bin/vpn\nKillMode=mixed\nFinalKillSignal=SIGQUIT\n",
		"vpn.service.d/10-kill.conf":  "[Service]\nKillMode=process\nTimeoutStopFailureMode=abort\nSendSIGKILL=no\n",
		"vpn.service.d/20-bus.conf":   "[Service]\nType=dbus\nBusName=org.example.Vpn\n",
		"vpn.service.d/30-other.conf": "[Unit]\nRefuseManualStop=yes\n",
	})
	s := goodService()
	s.FragmentPath = f["vpn.service"]
	s.DropInPaths = []string{f["vpn.service.d/10-kill.conf"], f["vpn.service.d/20-bus.conf"], f["vpn.service.d/30-other.conf"]}
	s.KillMode, s.SendSIGKILL, s.FinalKillSignal, s.TimeoutStopFailureMode = "process", false, 3, "abort"
	s.Type, s.BusName, s.RefuseManualStop = "dbus", "org.example.Vpn", true
	refusals, _ := assess(s, Config{StopWait: 10 * time.Second}.withDefaults())
	all := strings.Join(refusals, "\n")
	for _, want := range []string{
		"KillMode=process (set in " + f["vpn.service.d/10-kill.conf"] + ":2)",
		"SendSIGKILL=no (set in " + f["vpn.service.d/10-kill.conf"] + ":4)",
		"FinalKillSignal=SIGQUIT (set in " + f["vpn.service"] + ":4)",
		"TimeoutStopFailureMode=abort (set in " + f["vpn.service.d/10-kill.conf"] + ":3)",
		"BusName=org.example.Vpn (set in " + f["vpn.service.d/20-bus.conf"] + ":3)",
		"RefuseManualStop=yes (set in " + f["vpn.service.d/30-other.conf"] + ":2)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals:\n%s\nwant one containing %q", all, want)
		}
	}
}

// TestOrigins: where the value of a setting comes from, over a fragment
// and drop-ins in systemd's order, with continuations, comments and other
// sections in between.
func TestOrigins(t *testing.T) {
	dir := t.TempDir()
	f := writeFiles(t, dir, map[string]string{
		"a.service": "[Service]\nExecStop=/bin/a \\\n  --now\n# ExecStop=\nExecStop=/bin/b\nTimeoutStopSec=5\n" +
			"[Install]\nKillMode=none\n",
		"a.service.d/10.conf": "[Service]\nExecStop=/bin/c\n",
		"a.service.d/20.conf": "[Unit]\nExecStop=\n[Service]\nTimeoutSec=7\n",
		"a.service.d/30.conf": "[Service]\n  ExecStopPost =  \nExecStopPost=/bin/d\n",
	})
	s := settings{FragmentPath: f["a.service"], DropInPaths: []string{
		f["a.service.d/10.conf"], filepath.Join(dir, "gone.conf"), f["a.service.d/20.conf"], f["a.service.d/30.conf"]}}
	for _, tt := range []struct{ got, want string }{
		{s.listIn("Service", "ExecStop"), "set in " + f["a.service"] + ":2,5, " + f["a.service.d/10.conf"] + ":2"},
		{s.listIn("Service", "ExecStopPost"), "emptied in " + f["a.service.d/30.conf"] + ":2, then set in " + f["a.service.d/30.conf"] + ":3"},
		{s.listIn("Service", "ExecStartPre"), ""},
		{s.setIn("Service", "TimeoutStopSec", "TimeoutSec"), " (set in " + f["a.service.d/20.conf"] + ":4)"},
		{s.setIn("Service", "TimeoutStopSec"), " (set in " + f["a.service"] + ":6)"},
		{s.setIn("Service", "KillMode"), ""},
		{paren(""), ""},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
	masked := settings{FragmentPath: "/dev/null"}
	if got := masked.setIn("Service", "KillMode"); got != "" {
		t.Errorf("masked unit: %q", got)
	}
}

// TestVerifyNotApplied: why systemd does not apply the drop-in.
func TestVerifyNotApplied(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{StopWait: 4 * time.Second, DaemonUnit: "d.service", DropInDir: filepath.Join(dir, "run")}.withDefaults()
	p, err := newPlan(goodService(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ours := cfg.DropInPath("vpn.service")
	hiding := filepath.Join(dir, "etc", "vpn.service.d", DropInName)
	check := func(name string, s settings, applied, onDisk bool, want string) {
		t.Helper()
		var de *DropInError
		if err := p.verify(s); !errors.As(err, &de) || de.Applied != applied || de.OnDisk != onDisk || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: verify = %v (%+v), want applied %t, on disk %t, and %q", name, err, de, applied, onDisk, want)
		}
	}
	s := goodService()
	check("not on disk", s, false, false, ours+" among its drop-ins: it is not on disk")
	if err := writeAtomic(ours, p.DropIn); err != nil {
		t.Fatal(err)
	}
	check("not read", s, false, true, "it is on disk, but systemd has not read it")
	s.DropInPaths = []string{hiding}
	check("hidden", s, false, true, hiding+", of the same name, hides it")
}
