package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/redislease"
)

// TestClear: `unitlease clear` releases a stop_failed lease against a
// real Redis, says what it replaced, and refuses a held one.
func TestClear(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	path := filepath.Join(t.TempDir(), "unitlease.toml")
	if err := os.WriteFile(path, fmt.Appendf(nil, "node = \"op\"\n[redis]\nurl = \"redis://%s/0\"\n", srv.Addr()), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.RedisConfig()
	rc.Node = "node-a"
	holder, err := redislease.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	ctx := context.Background()
	units := []string{"db.service"}
	seen, err := holder.ObserveUnits(ctx, "db", units)
	if err != nil {
		t.Fatal(err)
	}
	held, err := holder.AcquireUnits(ctx, "db", units, seen)
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd("clear", "--config", path, "db")
	if code != 1 || !strings.Contains(stderr, "lease db is held, not stop_failed: clear only releases a lease whose holder could not stop its units") {
		t.Fatalf("clear of a held lease: exit %d, stderr %q", code, stderr)
	}
	held.StopFailed = true
	if _, err := holder.RenewUnits(ctx, "db", units, held); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd("clear", "--config", path, "db")
	want := fmt.Sprintf("lease db: was stop_failed on node-a at version %d\nunit keys released with it: db.service\n"+
		"lease db: now released at version %d; a standby may acquire it at once\n", held.Version+1, held.Version+2)
	if code != 0 || stdout != want {
		t.Fatalf("clear: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
}
