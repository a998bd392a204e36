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
	// A watcher hears clear's word to forget the lease's failures; a held
	// record is left as it is.
	wctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	wakes := holder.Wakeups(wctx, []string{"db"})
	if w := <-wakes; !w.Resync {
		t.Fatalf("first wake-up %+v, want the resync", w)
	}
	code, stdout, stderr := runCmd("clear", "--config", path, "db")
	want := "lease db: failures forgotten by the 1 daemons watching it; a node they excluded competes again\n"
	if code != 0 || stdout != want || stderr != "" {
		t.Fatalf("clear of a held lease: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
	code, _, stderr = runCmd("clear", "--config", path, "--stop-failed", "db")
	if code != 1 || !strings.Contains(stderr, "lease db is held, not stop_failed: --stop-failed releases only a lease whose holder could not stop its units") {
		t.Fatalf("clear --stop-failed of a held lease: exit %d, stderr %q", code, stderr)
	}
	if w := <-wakes; w != (redislease.Wake{Lease: "db", ClearFailures: true}) {
		t.Fatalf("the watcher heard %+v, want the word to clear db's failures", w)
	}
	held.StopFailed = true
	if _, err := holder.RenewUnits(ctx, "db", units, held); err != nil {
		t.Fatal(err)
	}
	// Without --stop-failed the failures are forgotten, and the record
	// stays: that is no word that the units are gone.
	code, _, stderr = runCmd("clear", "--config", path, "db")
	if code != 1 || !strings.Contains(stderr, "`unitlease clear --stop-failed db` releases it") {
		t.Fatalf("clear of a stop_failed lease without --stop-failed: exit %d, stderr %q", code, stderr)
	}
	if cur, err := holder.Observe(ctx, "db"); err != nil || !cur.StopFailed {
		t.Fatalf("the stop_failed record after clear without --stop-failed: %v, %v", cur, err)
	}
	code, stdout, stderr = runCmd("clear", "--config", path, "--stop-failed", "db")
	want = fmt.Sprintf("lease db: failures forgotten by the %d daemons watching it; a node they excluded competes again\n"+
		"lease db: was stop_failed on node-a at version %d\nunit keys released with it: db.service\n"+
		"lease db: now released at version %d; a standby may acquire it at once\n", 1, held.Version+1, held.Version+2)
	if code != 0 || stdout != want {
		t.Fatalf("clear: exit %d, stdout %q, stderr %q; want %q", code, stdout, stderr, want)
	}
}
