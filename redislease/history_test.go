package redislease

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

// TestHistoryNotes: against a real Redis, under the ACL, a release note,
// a transition and failure counts are written and read back; a count of
// zero removes the node's; notes of other leases stay apart.
func TestHistoryNotes(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Config: []string{ACL("unitlease", "s3cret-pw", "unitlease:")}})
	pw := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	user := func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw }
	a, b := newStore(t, srv, "node-a", user), newStore(t, srv, "node-b", user)
	if r, err := b.LastRelease(bg, "vpn:eu"); err != nil || r != nil {
		t.Fatalf("no note yet: %+v, %v", r, err)
	}
	if err := a.NoteRelease(bg, "vpn:eu", 41, "drain"); err != nil {
		t.Fatal(err)
	}
	r, err := b.LastRelease(bg, "vpn:eu")
	if err != nil || r == nil || r.By != "node-a" || r.Version != 41 || r.Why != "drain" || r.AtMS == 0 {
		t.Fatalf("release note: %+v, %v", r, err)
	}
	if rs, err := b.Releases(bg, []string{"vpn:eu", "db"}); err != nil || len(rs) != 1 || rs["vpn:eu"] != *r {
		t.Fatalf("releases: %+v, %v; want only vpn:eu's %+v", rs, err, *r)
	}
	at := time.UnixMilli(time.Now().UnixMilli())
	if err := b.NoteTransition(bg, "vpn:eu", Transition{At: at, From: "node-a", To: "node-b", Why: "drain", Token: 42}); err != nil {
		t.Fatal(err)
	}
	ts, err := a.Transitions(bg, []string{"vpn:eu", "db"})
	if want := (Transition{At: at, From: "node-a", To: "node-b", Why: "drain", Token: 42}); err != nil || len(ts) != 1 || ts["vpn:eu"] != want {
		t.Fatalf("transitions: %+v, %v; want %+v", ts, err, want)
	}
	if err := a.NoteFailures(bg, "vpn:eu", 2, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := b.NoteFailures(bg, "vpn:eu", 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	fs, err := a.Failures(bg)
	if err != nil || len(fs["vpn:eu"]) != 2 || fs["vpn:eu"][0] != (NodeFailures{"node-a", 2}) || fs["vpn:eu"][1] != (NodeFailures{"node-b", 3}) {
		t.Fatalf("failures: %+v, %v", fs, err)
	}
	if err := a.NoteFailures(bg, "vpn:eu", 0, time.Minute); err != nil {
		t.Fatal(err)
	}
	if fs, err := b.Failures(bg); err != nil || len(fs["vpn:eu"]) != 1 || fs["vpn:eu"][0].Node != "node-b" {
		t.Fatalf("failures after node-a's went to zero: %+v, %v", fs, err)
	}
	if entries, err := a.List(bg); err != nil || len(entries) != 0 {
		t.Fatalf("the notes are no leases: List %+v, %v", entries, err)
	}
}
