package unitctl

import (
	"strings"
	"testing"
)

// TestEnvTakesBackslashLeaseNames: a lease name may hold systemd's
// \x2d escapes (a lease defaults to its unit's name): the value is
// single-quoted, which systemd reads as it is (checked in a booted node:
// UNITLEASE_LEASE='backup@srv\x2d01.service' reaches the unit with its
// backslash). It was refused, and every start of such a unit failed.
func TestEnvTakesBackslashLeaseNames(t *testing.T) {
	cfg := Config{EnvDir: t.TempDir()}
	unit := `backup@srv\x2d01.service`
	if err := ValidLeaseName(unit); err != nil {
		t.Fatalf("precondition: %v", err)
	}
	env := [][2]string{{"UNITLEASE_LEASE", unit}, {"UNITLEASE_NODE", "node-a"}, {"UNITLEASE_TOKEN", "1796105101043"}}
	if err := WriteEnv(cfg, unit, env); err != nil {
		t.Fatalf("the default lease of %s (a valid lease name) cannot go into its environment file, so every start fails: %v", unit, err)
	}
}

// TestEnvFileNameTooLong: a unit name whose escaped form would make the
// file name (or WriteEnv's temporary file) longer than 255 bytes gets a
// hashed name, and WriteEnv writes it.
func TestEnvFileNameTooLong(t *testing.T) {
	cfg := Config{EnvDir: t.TempDir()}
	unit := strings.Repeat("a_", 60) + ".service" // 128 bytes, a valid unit name
	if err := WriteEnv(cfg, unit, [][2]string{{"UNITLEASE_TOKEN", "1"}}); err != nil {
		t.Fatalf("unit %q (%d bytes; systemd allows 255): %v", unit, len(unit), err)
	}
}
