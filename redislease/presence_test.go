package redislease

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
)

// eventually polls cond (a read of Redis) until it holds: a subscription
// sent on one connection is seen on another only once Redis read it.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAnnouncements: what a node announces (under the ACL's user) is
// what peers read, exactly, lease names with a backslash and a colon
// included; a change is seen; and everything is gone once its context
// ends, with nothing left in Redis.
func TestAnnouncements(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Config: []string{ACL("unitlease", "s3cret-pw", "unitlease:")}})
	withUser := func(c *Config) { c.Username, c.PasswordFile = "unitlease", writePassword(t, "s3cret-pw") }
	a, b := newStore(t, srv, "node-a", withUser), newStore(t, srv, "node-b", withUser)
	const odd = `db\x2d1:x`
	ctxA, endA := context.WithCancel(bg)
	defer endA()
	pa := a.Announce(ctxA)
	if err := pa.Set(bg, []Announcement{
		{Node: "node-a", State: AnnounceReady, Lease: "vpn"},
		{Node: "node-a", State: AnnounceIneligible, Lease: odd},
	}); err != nil {
		t.Fatal(err)
	}
	pb := b.Announce(bg)
	if err := pb.Set(bg, []Announcement{{Node: "node-b", State: AnnounceDrained}, {Node: "node-b", State: AnnounceDrained, Lease: "vpn"}}); err != nil {
		t.Fatal(err)
	}
	state := func(lease, node string) string {
		s, err := b.Announced(bg, lease, node)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	eventually(t, "node-a ready for vpn", func() bool { return state("vpn", "node-a") == AnnounceReady })
	eventually(t, "node-b drained", func() bool { return state("vpn", "node-b") == AnnounceDrained })
	if s := state(odd, "node-a"); s != AnnounceIneligible {
		t.Fatalf("node-a for %s: %q", odd, s)
	}
	if s := state("vpn", "node-c"); s != "" {
		t.Fatalf("node-c, which announces nothing: %q", s)
	}
	ready, err := b.ReadyAmong(bg, map[string][]string{"vpn": {"node-a", "node-b", "node-c"}, odd: {"node-a"}})
	if err != nil || !slices.Equal(ready["vpn"], []string{"node-a"}) || len(ready[odd]) != 0 {
		t.Fatalf("ready among: %v, %v", ready, err)
	}
	all, err := b.Announcements(bg)
	want := []Announcement{
		{Node: "node-a", State: AnnounceIneligible, Lease: odd},
		{Node: "node-a", State: AnnounceReady, Lease: "vpn"},
		{Node: "node-b", State: AnnounceDrained},
		{Node: "node-b", State: AnnounceDrained, Lease: "vpn"},
	}
	if err != nil || !slices.Equal(all, want) {
		t.Fatalf("announcements:\n%v, %v\nwant\n%v", all, err, want)
	}

	// A change replaces the announcement; no moment shows both gone.
	if err := pa.Set(bg, []Announcement{{Node: "node-a", State: AnnounceExcluded, Lease: "vpn"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "node-a excluded", func() bool { return state("vpn", "node-a") == AnnounceExcluded })
	eventually(t, "node-a no longer announces "+odd, func() bool { return state(odd, "node-a") == "" })

	endA()
	eventually(t, "node-a gone", func() bool { return state("vpn", "node-a") == "" })
	if keys := srv.Command("DBSIZE"); keys != "0" {
		t.Fatalf("announcing wrote %s keys", keys)
	}
}
