package unitctl

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestNodeValidateKnowingTheLinks: validation with a scan of the unit
// directories (ScanLinks) refuses every unit that systemd reports
// enabled or linked, each way systemctl makes one (enable, enable
// --runtime, link, an alias, a template's instance, and a link made by
// hand with no reload, which systemd's property does not show yet), with
// the state systemd reports; and for a unit no link ties it reads the same
// settings as the read that asks systemd for everything, UnitFileState
// aside, and the same plan.
func TestNodeValidateKnowingTheLinks(t *testing.T) {
	s := dialNode(t, Options{})
	install := "[Install]\nWantedBy=multi-user.target\n"
	outside := "/opt/ul-links/ul-lnk-linked.service"
	if err := os.MkdirAll(filepath.Dir(outside), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outside, []byte(plainService), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(filepath.Dir(outside)) })
	installUnits(t, map[string]string{
		"ul-lnk-enabled.service": plainService + install,
		"ul-lnk-runtime.service": plainService + install,
		"ul-lnk-alias.service":   plainService + "[Install]\nAlias=ul-lnk-other-name.service\n",
		"ul-lnk-tmpl@.service":   plainService + install,
		"ul-lnk-plain.service":   plainService + install, // can be enabled, is not
		"ul-lnk-static.service":  plainService,
	})
	systemctl(t, "enable", "ul-lnk-enabled.service", "ul-lnk-alias.service", "ul-lnk-tmpl@one.service")
	systemctl(t, "enable", "--runtime", "ul-lnk-runtime.service")
	systemctl(t, "link", outside)
	t.Cleanup(func() {
		systemctlQuiet("disable", "ul-lnk-enabled.service", "ul-lnk-alias.service", "ul-lnk-tmpl@one.service", "ul-lnk-linked.service")
		systemctlQuiet("disable", "--runtime", "ul-lnk-runtime.service")
		systemctlQuiet("daemon-reload")
	})
	ctx := ctxFor(t, time.Minute)
	links, err := s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{StopWait: 4 * time.Second, Guard: []string{"/run/ul-test/guard"}, DaemonUnit: "ul-lnk-daemon.service"}
	for _, unit := range []string{"ul-lnk-enabled.service", "ul-lnk-runtime.service", "ul-lnk-alias.service",
		"ul-lnk-tmpl@one.service", "ul-lnk-linked.service"} {
		state := show(t, unit, "UnitFileState")
		if !strings.HasPrefix(state, "enabled") && !strings.HasPrefix(state, "linked") {
			t.Fatalf("%s: UnitFileState=%s after systemctl, the test sets it up wrong", unit, state)
		}
		_, err := s.Validate(ctx, unit, cfg, links)
		var refused *RefusedError
		if !errors.As(err, &refused) || !strings.Contains(err.Error(), "UnitFileState="+state) {
			t.Errorf("%s (UnitFileState=%s): Validate knowing the links = %v, want refused for UnitFileState=%s", unit, state, err, state)
		}
	}
	// A link made by hand, with no reload, to a unit systemd holds loaded
	// (it runs): its UnitFileState property stays as it was until a
	// reload, the manager's GetUnitFileState does not.
	byHand := "ul-lnk-byhand.service"
	installUnits(t, map[string]string{byHand: plainService + install})
	systemctl(t, "start", byHand)
	if prop := show(t, byHand, "UnitFileState"); prop != "disabled" { // systemd keeps it from here on
		t.Fatalf("%s: UnitFileState=%s before the link, want disabled", byHand, prop)
	}
	wants := "/etc/systemd/system/multi-user.target.wants/" + byHand
	if err := os.Symlink("/etc/systemd/system/"+byHand, wants); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(wants) })
	if prop := show(t, byHand, "UnitFileState"); prop != "disabled" {
		t.Fatalf("%s: UnitFileState=%s right after a link by hand, want the stale disabled: the test sets it up wrong", byHand, prop)
	}
	links, err = s.ScanLinks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Validate(ctx, byHand, cfg, links); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "UnitFileState=enabled") {
		t.Errorf("%s, linked by hand with no reload: Validate knowing the links = %v, want refused for UnitFileState=enabled", byHand, err)
	}
	for _, unit := range []string{"ul-lnk-plain.service", "ul-lnk-static.service"} {
		full, err := s.readSettings(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		known, err := s.readSettingsKnowing(ctx, unit, links)
		if err != nil {
			t.Fatal(err)
		}
		if known.UnitFileState != "" {
			t.Errorf("%s: read knowing the links with UnitFileState=%s: systemd was asked for it", unit, known.UnitFileState)
		}
		full.UnitFileState = ""
		full.sortSets()
		known.sortSets()
		if !reflect.DeepEqual(full, known) {
			t.Errorf("%s: read knowing the links\n%+v\nread asking systemd for everything\n%+v", unit, known, full)
		}
		p1, err1 := s.Validate(ctx, unit, cfg, nil)
		p2, err2 := s.Validate(ctx, unit, cfg, links)
		if err1 != nil || err2 != nil || string(p1.DropIn) != string(p2.DropIn) || !reflect.DeepEqual(p1.Warnings, p2.Warnings) {
			t.Errorf("%s: Validate asking systemd: %v %v; knowing the links: %v %v", unit, p1, err1, p2, err2)
		}
	}
}
