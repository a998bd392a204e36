package redislease

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
)

// TestOddRenewOverUnitKeyOfAnotherType: a unit key of another type (a
// hash another client wrote) is garbage to the renew and release scripts,
// as a string of garbage is: the lease is renewed (released) all the
// same, with a *GarbageError naming the key. Before, the scripts' GET
// failed with WRONGTYPE: every renewal was outcome unknown, and the
// holder stopped its units at its deadline.
func TestOddRenewOverUnitKeyOfAnotherType(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	units := []string{"web.service", "db.service"}
	held := acquireUnits(t, a, "web", units)

	srv.Command("DEL", "unitlease:unit:db.service")
	srv.Command("HSET", "unitlease:unit:db.service", "x", "y")

	next, err := a.RenewUnits(bg, "web", units, held)
	var g *GarbageError
	if !errors.As(err, &g) || next.Version <= held.Version {
		t.Errorf("renew with a hash under a unit key: %+v, %v\nwant the lease renewed and a *GarbageError naming unitlease:unit:db.service (as for a string of garbage)", next, err)
	}
	if errors.Is(err, ErrUnknown) {
		t.Errorf("the renewal failed as outcome unknown: the holder will stop its units at its deadline")
	}
	if next.Version == 0 {
		next = held
	}
	rel, err := a.ReleaseUnits(bg, "web", units, next)
	if !errors.As(err, &g) || !rel.Released {
		t.Errorf("release with a hash under a unit key: %+v, %v\nwant released, with a *GarbageError naming the unit key", rel, err)
	}
}

// TestOddWriteScriptsNeverReturnHugeValues: the write scripts read a key
// as observations do (getv), so their garbage and conflict replies carry
// at most a marker, never a value of megabytes (before, every renewal
// brought a 2 MiB unit key back whole).
func TestOddWriteScriptsNeverReturnHugeValues(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	units := []string{"web.service"}
	held := acquireUnits(t, a, "web", units)

	srv.Command("SETRANGE", "unitlease:unit:web.service", strconv.Itoa(2<<20), "x") // 2 MiB
	_, err := a.RenewUnits(bg, "web", units, held)
	var g *GarbageError
	if !errors.As(err, &g) {
		t.Fatalf("renew over a 2 MiB unit key: %v, want a *GarbageError", err)
	}
	if len(g.Value) > MaxValue {
		t.Errorf("the renewal's reply carried the unit key's %d bytes whole (at most %d are ever read by an observation)", len(g.Value), MaxValue)
	}

	srv.Command("SETRANGE", "unitlease:lease:db", strconv.Itoa(2<<20), "x")
	seen, _ := a.Observe(bg, "db") // an Odd: Raw is its marker
	_, err = a.Overwrite(bg, "db", seen)
	var c *ConflictError
	if errors.As(err, &c) && len(c.Current.Raw) > MaxValue {
		t.Errorf("overwrite's conflict reply carried the lease key's %d bytes whole", len(c.Current.Raw))
	}
}

// TestOddPingProbesStrlenAndGetrange: Ping probes every command an
// observation may need (TYPE, STRLEN, GETRANGE, TIME), even on a missing
// key, so a user without +strlen or +getrange is refused at start rather
// than failing on the first long value.
func TestOddPingProbesStrlenAndGetrange(t *testing.T) {
	acl := strings.Replace(ACL("unitlease", "s3cret-pw", "unitlease:"), " +strlen +getrange", "", 1)
	srv := redistest.Start(t, redistest.Options{Config: []string{acl}})
	pw := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := newStore(t, srv, "node-a", func(c *Config) { c.Username, c.PasswordFile = "unitlease", pw })
	srv.Command("SETRANGE", "unitlease:lease:vpn", strconv.Itoa(1<<20), "x")
	_, obsErr := a.Observe(bg, "vpn")
	if err := a.Ping(bg); !errors.Is(err, ErrPermission) {
		t.Errorf("ping with an ACL without +strlen +getrange: %v, want ErrPermission (an observation of a long value fails with: %v)", err, obsErr)
	}
}

// TestOddListReadsOddValuesAsGarbage: List (status, the daemon's
// snapshot) reads keys as observations do: a list in a lease key is
// garbage, not missing, and a 2 MiB value is not read whole.
func TestOddListReadsOddValuesAsGarbage(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	srv.Command("RPUSH", "unitlease:lease:db", "x")
	srv.Command("SETRANGE", "unitlease:lease:vpn", strconv.Itoa(2<<20), "x")
	entries, err := a.List(bg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name {
		case "db":
			if e.Err == nil {
				t.Errorf("List shows a lease key that holds a list as %+v (missing), want garbage: a Redis list", e.Record)
			}
		case "vpn":
			if len(e.Record.Raw) > MaxValue {
				t.Errorf("List read a %d-byte value whole (an observation reads %d at most)", len(e.Record.Raw), MaxValue)
			}
		}
	}
}

// TestOddMarkerIsDistinct: a short string whose bytes are an odd
// value's marker reads as its own marker (its length, its first bytes),
// never as the long value's, so Overwrite given the long value's
// observation leaves it alone.
func TestOddMarkerIsDistinct(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")

	srv.Command("SETRANGE", "unitlease:lease:vpn", "69999", "x") // 70000 bytes of zeros, then x
	long, err := a.Observe(bg, "vpn")
	if !errors.Is(err, ErrGarbage) {
		t.Fatalf("observe of 70000 bytes: %v", err)
	}
	// Another client writes the marker's bytes as a short value.
	if _, err := a.rdb.Set(bg, "unitlease:lease:vpn", long.Raw, 0).Result(); err != nil {
		t.Fatal(err)
	}
	short, err := a.Observe(bg, "vpn")
	if !errors.Is(err, ErrGarbage) {
		t.Fatalf("observe of the short value: %v", err)
	}
	if short.Raw == long.Raw {
		t.Errorf("a %d-byte string and a 70000-byte string are observed with the same Raw %q", len(short.Raw), short.Raw)
	}
	if _, err := a.Overwrite(bg, "vpn", long); err == nil {
		t.Errorf("Overwrite with the observation of the 70000-byte value replaced a %d-byte value nobody was shown", len(short.Raw))
	}

	// A list's marker says only its type (its contents are garbage that
	// is never acquired over, whatever they are); Overwrite over it works.
	srv.Command("RPUSH", "unitlease:lease:db", "a")
	l2, _ := a.Observe(bg, "db")
	if _, err := a.Overwrite(bg, "db", l2); err != nil {
		t.Errorf("Overwrite of a list's observation: %v", err)
	}
}
