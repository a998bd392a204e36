package redislease

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

var dbUnit = []string{"db.service"}

func observeUnits(t *testing.T, s *Store, name string, units []string) policy.Record {
	t.Helper()
	r, err := s.ObserveUnits(bg, name, units)
	if err != nil {
		t.Fatalf("observe %s %v: %v", name, units, err)
	}
	return r
}

func acquireUnits(t *testing.T, s *Store, name string, units []string) policy.Record {
	t.Helper()
	l, err := s.AcquireUnits(bg, name, units, observeUnits(t, s, name, units))
	if err != nil {
		t.Fatalf("acquire %s %v: %v", name, units, err)
	}
	return l
}

// unitKey is what Redis holds under a unit's key ("" when missing).
func unitKey(srv *redistest.Server, unit string) string {
	return srv.Command("GET", "unitlease:unit:"+unit)
}

// The holder writes the unit key with the lease key: acquire claims it,
// every renewal and the release mirror the lease's record into it.
func TestUnitKeysFollowTheLease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newStore(t, srv, "node-a")
	units := []string{"db.service", "web.service"}
	l := acquireUnits(t, a, "A", units)
	for _, u := range units {
		if got, want := unitKey(srv, u), EncodeUnit("A", l); got != want {
			t.Fatalf("after acquire, %s's key is %q, want %q", u, got, want)
		}
		if ttl := srv.Command("PTTL", "unitlease:unit:"+u); ttl == "-1" || ttl == "-2" {
			t.Fatalf("%s's key has no TTL (%s)", u, ttl)
		}
	}
	l2, err := a.RenewUnits(bg, "A", units, l)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := unitKey(srv, "web.service"), EncodeUnit("A", l2); got != want {
		t.Fatalf("after renew: %q, want %q", got, want)
	}
	// A unit key that went missing is written again by the next renewal.
	srv.Command("DEL", "unitlease:unit:db.service")
	l3, err := a.RenewUnits(bg, "A", units, l2)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := unitKey(srv, "db.service"), EncodeUnit("A", l3); got != want {
		t.Fatalf("renewal did not restore the missing unit key: %q, want %q", got, want)
	}
	// Its own unit keys never keep the lease's standbys out.
	b := newStore(t, srv, "node-b")
	if o := observeUnits(t, b, "A", units); otherOf(o).Lease != "" || !o.Same(l3) {
		t.Fatalf("a standby of A observes %+v, want A's own record", o)
	}
	rel, err := a.ReleaseUnits(bg, "A", units, l3)
	if err != nil || !rel.Released {
		t.Fatalf("release: %+v %v", rel, err)
	}
	if got, want := unitKey(srv, "db.service"), EncodeUnit("A", rel); got != want {
		t.Fatalf("after release: %q, want %q", got, want)
	}
	r, err := DecodeUnit("k", "db.service", unitKey(srv, "db.service"))
	if err != nil || !r.Released || otherOf(r).Lease != "A" || otherOf(r).Unit != "db.service" {
		t.Fatalf("released unit key decodes as %+v, %v", r, err)
	}
}

// Lease B names db.service, which lease A holds: B's observation is A's
// record, marked; acquiring B over anything but what was aged is refused.
func TestAcquireRefusedWhileAnotherLeaseHoldsAUnit(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	la := acquireUnits(t, a, "A", dbUnit)
	before := unitKey(srv, "db.service")

	o := observeUnits(t, b, "B", dbUnit)
	if !o.Present || otherOf(o).Lease != "A" || otherOf(o).Unit != "db.service" || o.Holder != "node-a" || o.Version != la.Version || o.Released ||
		o.LeaseSpan != 37*time.Second {
		t.Fatalf("B observes %+v, want A's record marked with lease A and db.service", o)
	}
	if got := o.String(); got != fmt.Sprintf("db.service held under lease A by node-a at version %d", la.Version) {
		t.Fatalf("String: %q", got)
	}

	// Not aged: B's key is missing, but db.service is A's.
	_, err := b.AcquireUnits(bg, "B", dbUnit, policy.Absent)
	var claimed *ClaimedError
	if !errors.As(err, &claimed) || !errors.Is(err, ErrClaimed) || claimed.Unit != "db.service" || otherOf(claimed.Current).Lease != "A" ||
		!strings.Contains(err.Error(), "db.service") || !strings.Contains(err.Error(), "lease A") || !strings.Contains(err.Error(), "lease B") {
		t.Fatalf("acquire over missing while A holds db.service: %v", err)
	}
	if srv.Command("EXISTS", "unitlease:lease:B") != "0" || unitKey(srv, "db.service") != before {
		t.Fatal("a refused acquisition wrote something")
	}

	// A renews: the record B aged changed.
	la, err = a.RenewUnits(bg, "A", dbUnit, la)
	if err != nil {
		t.Fatal(err)
	}
	if o2 := observeUnits(t, b, "B", dbUnit); o2.Same(o) || o2.Version != la.Version {
		t.Fatalf("B's observation did not change with A's renewal: %+v", o2)
	}
	_, err = b.AcquireUnits(bg, "B", dbUnit, o)
	if !errors.As(err, &claimed) || claimed.Seen == "" || !strings.Contains(err.Error(), "not the record of lease A this node aged") {
		t.Fatalf("acquire over a stale observation of A: %v", err)
	}

	// A stops renewing; B acquires over exactly what it aged and claims
	// the unit.
	o = observeUnits(t, b, "B", dbUnit)
	lb, err := b.AcquireUnits(bg, "B", dbUnit, o)
	if err != nil || lb.Holder != "node-b" || otherOf(lb).Lease != "" {
		t.Fatalf("acquire over the aged record of A: %+v %v", lb, err)
	}
	if got, want := unitKey(srv, "db.service"), EncodeUnit("B", lb); got != want {
		t.Fatalf("B did not claim db.service: %q, want %q", got, want)
	}
	// A's holder, back, has lost the unit: its renewal is a loss, and
	// writes nothing.
	_, err = a.RenewUnits(bg, "A", dbUnit, la)
	var lost *LostError
	if !errors.As(err, &lost) || otherOf(lost.Current).Lease != "B" || lost.Current.Holder != "node-b" || !strings.Contains(err.Error(), "lease B") {
		t.Fatalf("renewal of A after B claimed db.service: %v", err)
	}
	if got := srv.Command("GET", "unitlease:lease:A"); got != la.Raw {
		t.Fatalf("the lost renewal wrote A's key: %q", got)
	}
	// Its release (the unit stopped) still releases A, and leaves the unit
	// key to B.
	if rel, err := a.ReleaseUnits(bg, "A", dbUnit, la); err != nil || !rel.Released {
		t.Fatalf("release of A: %+v %v", rel, err)
	}
	if got, want := unitKey(srv, "db.service"), EncodeUnit("B", lb); got != want {
		t.Fatalf("A's release wrote over B's unit key: %q", got)
	}
	// A's standby now ages B's record in turn.
	if o := observeUnits(t, a, "A", dbUnit); otherOf(o).Lease != "B" || o.Holder != "node-b" {
		t.Fatalf("A observes %+v, want B's record", o)
	}
}

// Once A released the unit, B's observation is B's own key again, and B
// acquires over it as over any value it aged.
func TestReleasedUnitNoLongerKeepsOut(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	la := acquireUnits(t, a, "A", dbUnit)
	o := observeUnits(t, b, "B", dbUnit)
	if _, err := a.ReleaseUnits(bg, "A", dbUnit, la); err != nil {
		t.Fatal(err)
	}
	// What B aged is gone: refused, naming the released record.
	_, err := b.AcquireUnits(bg, "B", dbUnit, o)
	var claimed *ClaimedError
	if !errors.As(err, &claimed) || !claimed.Current.Released || !strings.Contains(err.Error(), "now released under lease A") {
		t.Fatalf("acquire over A's record after its release: %v", err)
	}
	// B now observes A's released record of db.service: its value is
	// what B ages (a data loss that turns it into a missing key must
	// start B's age over), and B acquires over it like over any other.
	o = observeUnits(t, b, "B", dbUnit)
	if o.Other == nil || !o.Other.Released || o.Other.Lease != "A" || o.Released {
		t.Fatalf("B observes %+v after A's release, want A's released record of db.service, aged", o)
	}
	// A unit key gone since it was observed: refused too.
	saved := unitKey(srv, "db.service")
	srv.Command("DEL", "unitlease:unit:db.service")
	if _, err := b.AcquireUnits(bg, "B", dbUnit, o); !errors.As(err, &claimed) || claimed.Current.Present ||
		!strings.Contains(err.Error(), "unit db.service is now missing") {
		t.Fatalf("acquire over A's record after its unit key went: %v", err)
	}
	srv.Command("SET", "unitlease:unit:db.service", saved)
	lb := acquireUnits(t, b, "B", dbUnit)
	if got, want := unitKey(srv, "db.service"), EncodeUnit("B", lb); got != want {
		t.Fatalf("B did not claim db.service: %q", got)
	}
	// A standby of A sees B's record now.
	if o := observeUnits(t, a, "A", dbUnit); otherOf(o).Lease != "B" {
		t.Fatalf("A observes %+v", o)
	}
	// A renewal of B claims the unit again over a released record of A
	// (written there meanwhile); B's release leaves another lease's
	// released record as it is.
	srv.Command("SET", "unitlease:unit:db.service", saved)
	lb, err = b.RenewUnits(bg, "B", dbUnit, lb)
	if got, want := unitKey(srv, "db.service"), EncodeUnit("B", lb); err != nil || got != want {
		t.Fatalf("renewal over A's released record: %v, unit key %q", err, got)
	}
	srv.Command("SET", "unitlease:unit:db.service", saved)
	if _, err := b.ReleaseUnits(bg, "B", dbUnit, lb); err != nil || unitKey(srv, "db.service") != saved {
		t.Fatalf("release of B wrote over A's released record: %v, unit key %q", err, unitKey(srv, "db.service"))
	}
}

// A record of another lease sits beside the lease's own record: B's key
// held by a node that managed B with other units, db.service held under
// A. Both are in the observation: a change to either changes it, and the
// acquisition compares both.
func TestObservationCoversTheLeaseKeyAndEveryUnit(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b, c := newStore(t, srv, "node-a"), newStore(t, srv, "node-b"), newStore(t, srv, "node-c")
	lc := acquireUnits(t, c, "B", []string{"other.service"})
	la := acquireUnits(t, a, "A", dbUnit)
	units := []string{"db.service", "web.service"}
	o := observeUnits(t, b, "B", units)
	if otherOf(o).Lease != "A" || otherOf(o).Unit != "db.service" {
		t.Fatalf("B observes %+v", o)
	}
	// B's own holder renews: the observation changes, and the old one is
	// a conflict on B's key.
	if _, err := c.RenewUnits(bg, "B", []string{"other.service"}, lc); err != nil {
		t.Fatal(err)
	}
	o2 := observeUnits(t, b, "B", units)
	if o2.Same(o) {
		t.Fatal("a renewal of B's own record did not change the observation")
	}
	if _, err := b.AcquireUnits(bg, "B", units, o); !errors.Is(err, ErrConflict) {
		t.Fatalf("acquire over a changed own key: %v", err)
	}
	// Another unit claimed by another lease after the observation: refused.
	lw := acquireUnits(t, c, "W", []string{"web.service"})
	_, err := b.AcquireUnits(bg, "B", units, o2)
	var claimed *ClaimedError
	if !errors.As(err, &claimed) || claimed.Unit != "web.service" || otherOf(claimed.Current).Lease != "W" || claimed.Seen != "" {
		t.Fatalf("acquire while web.service was claimed since: %v", err)
	}
	o3 := observeUnits(t, b, "B", units)
	if o3.LeaseSpan != 37*time.Second || otherOf(o3).Lease != "A" {
		t.Fatalf("observation %+v", o3)
	}
	lb, err := b.AcquireUnits(bg, "B", units, o3)
	if err != nil || lb.Version <= lc.Version+1 {
		t.Fatalf("acquire over the full observation: %+v %v", lb, err)
	}
	for _, u := range units {
		if got, want := unitKey(srv, u), EncodeUnit("B", lb); got != want {
			t.Fatalf("%s: %q, want %q", u, got, want)
		}
	}
	_ = la
	_ = lw
}

// A unit key holding anything but a unit record is reported with its key
// and never written over: no standby acquires over it, and the holder
// renews and releases its lease without touching it.
func TestGarbageUnitKey(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	units := []string{"db.service", "web.service"}
	la := acquireUnits(t, a, "A", units)
	const junk = `{"lease":"A","holder":"node-a"}`
	srv.Command("SET", "unitlease:unit:db.service", junk)

	_, err := b.ObserveUnits(bg, "B", units)
	var g *GarbageError
	if !errors.As(err, &g) || g.Key != "unitlease:unit:db.service" || g.Value != junk {
		t.Fatalf("observe with a garbage unit key: %v", err)
	}
	if _, err := b.AcquireUnits(bg, "B", units, policy.Absent); !errors.As(err, &g) || g.Key != "unitlease:unit:db.service" {
		t.Fatalf("acquire with a garbage unit key: %v", err)
	}
	if _, err := a.ObserveUnits(bg, "A", units); !errors.As(err, &g) {
		t.Fatalf("A's own standby: %v", err)
	}
	l2, err := a.RenewUnits(bg, "A", units, la)
	if !l2.Present || l2.Version != la.Version+1 || !errors.As(err, &g) || g.Key != "unitlease:unit:db.service" {
		t.Fatalf("renew with a garbage unit key: %+v %v (want renewed, and the garbage reported)", l2, err)
	}
	if got := unitKey(srv, "db.service"); got != junk {
		t.Fatalf("renewal wrote over garbage: %q", got)
	}
	if got, want := unitKey(srv, "web.service"), EncodeUnit("A", l2); got != want {
		t.Fatalf("renewal skipped the sound unit key: %q", got)
	}
	rel, err := a.ReleaseUnits(bg, "A", units, l2)
	if !rel.Released || !errors.As(err, &g) {
		t.Fatalf("release with a garbage unit key: %+v %v", rel, err)
	}
	if got := unitKey(srv, "db.service"); got != junk {
		t.Fatalf("release wrote over garbage: %q", got)
	}
	// A caller that skips Observe is stopped by the script.
	if _, err := b.AcquireUnits(bg, "B", units, policy.Absent); !errors.Is(err, ErrGarbage) || unitKey(srv, "db.service") != junk {
		t.Fatalf("acquire over garbage: %v", err)
	}
}

// The Go decoder and the scripts' decoder agree on what is a unit record:
// every value here is offered to the acquire script, which refuses exactly
// the ones DecodeUnit calls garbage, and writes over the others.
func TestUnitRecordRuleIsTheScripts(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	b := newStore(t, srv, "node-b")
	good := policy.Record{Present: true, Holder: "node-a", Version: 7, Token: goodToken, Released: true, LeaseSpan: 37 * time.Second}
	good.Raw = Encode(good)
	rec := good.Raw[1:]
	values := []string{
		EncodeUnit("A", good),
		EncodeUnit(`we\ird:lease@x.y_z-1`, good),
		`{"lease":"A",` + rec,
		`{"lease":"A\\\\",` + rec,
		`{"lease":"",` + rec,
		`{"lease":"A\\",` + rec,
		`{"lease":"A\\\",` + rec,
		`{"lease":"A B",` + rec,
		`{"lease":"A\u00e9",` + rec,
		`{"lease":"Aé",` + rec,
		`{"lease": "A",` + rec,
		`{"lease":"A","extra":1,` + rec,
		`{"lease":"A"}`,
		`{"lease":"A",` + strings.Replace(rec, `"version":7`, `"version":7.0`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"version":7`, `"version":07`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"version":7`, `"version":9007199254740992`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"version":7`, `"version":9007199254740991`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"lease_span_ms":37000`, `"lease_span_ms":-1`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"lease_span_ms":37000`, `"lease_span_ms":0`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"lease_span_ms":37000`, `"lease_span_ms":3600000`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"lease_span_ms":37000`, `"lease_span_ms":3600001`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"node-a"`, `"-node"`, 1),
		`{"lease":"A",` + strings.Replace(rec, `"node-a"`, `"node a"`, 1),
		`{"lease":"A",` + strings.Replace(rec, goodToken, strings.ToUpper(goodToken), 1),
		`{"lease":"A",` + strings.Replace(rec, `"released"`, `"gone"`, 1),
		`{"lease":"A",` + rec + ` `,
		` {"lease":"A",` + rec,
		`{"lease":"A",{"holder":"node-a"}`,
		``, `x`, `null`,
	}
	for i, v := range values {
		_, goErr := DecodeUnit("k", "u.service", v)
		unit := "u" + string(rune('a'+i)) + ".service"
		srv.Command("SET", "unitlease:unit:"+unit, v)
		// Missing B, and the unit key's value seen: a valid unit record of
		// A that is released is written over; garbage is refused.
		_, _, err := b.run(bg, acquireScript, "B"+unit, []string{unit}, "", "1", "node-b", goodToken, 0, 60000, "c", 37000, "B", v)
		if err != nil {
			t.Fatal(err)
		}
		after := unitKey(srv, unit)
		scriptGarbage := after == v
		if (goErr != nil) != scriptGarbage {
			t.Errorf("%q: DecodeUnit says %v, the script wrote over it: %t", v, goErr, !scriptGarbage)
		}
	}
}

func TestDecodeUnitRoundTrip(t *testing.T) {
	r := policy.Record{Present: true, Holder: "node-a", Version: 3, Token: goodToken, LeaseSpan: 36072 * time.Millisecond}
	r.Raw = Encode(r)
	for _, lease := range []string{"vpn", `a\b`, `x\\`, "vpn@eu.service"} {
		v := EncodeUnit(lease, r)
		got, err := DecodeUnit("k", "u.service", v)
		want := r
		want.Raw = v
		if err != nil || got.Other == nil || *got.Other != (policy.OtherLease{Lease: lease, Unit: "u.service"}) {
			t.Fatalf("%s: %+v %v", lease, got, err)
		}
		got.Other = nil
		if got != want {
			t.Fatalf("%s: %+v %v, want %+v", lease, got, err, want)
		}
	}
	if _, err := escapeLease(`a"b`); err == nil {
		t.Fatal(`a lease name with " accepted`)
	}
}

func TestCompositeRoundTrip(t *testing.T) {
	own := policy.Record{Present: true, Raw: `{"x":"1,2:3"}`, LeaseSpan: time.Second}
	f := []policy.Record{{Other: &policy.OtherLease{Lease: "A", Unit: "a.service"}, Holder: "n", Version: 4, LeaseSpan: 2 * time.Second},
		{Other: &policy.OtherLease{Lease: "C", Unit: "c.service"}, LeaseSpan: time.Second}}
	for _, o := range []policy.Record{own, policy.Absent} {
		c := composite{own: o, units: []string{"a.service", "c.service"}, vals: []string{"v:1,", ""}}
		r := c.record(f)
		if otherOf(r).Lease != "A" || otherOf(r).Unit != "a.service" || r.Holder != "n" || r.Version != 4 || r.LeaseSpan != 2*time.Second {
			t.Fatalf("%+v", r)
		}
		gotOwn, vals, ok := parseComposite(r.Raw)
		if !ok || gotOwn.Present != o.Present || gotOwn.Raw != o.Raw || vals["a.service"] != "v:1," || vals["c.service"] != "" || len(vals) != 2 {
			t.Fatalf("parse %q: %+v %v %t", r.Raw, gotOwn, vals, ok)
		}
	}
	for _, bad := range []string{"", "-", "+3:abc,", "x1:a,1:b,", "-1:a,", "-1:a,2:b,", "-9:a,1:b,"} {
		if _, _, ok := parseComposite(bad); ok {
			t.Errorf("parseComposite(%q) accepted", bad)
		}
	}
}

// The daemon's requests with units under the ACL of the README.
func TestUnitKeysUnderTheACL(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{Config: []string{ACL("unitlease", "s3cret-pw", "unitlease:")}})
	withUser := func(c *Config) { c.Username, c.PasswordFile = "unitlease", writePassword(t, "s3cret-pw") }
	a, b := newStore(t, srv, "node-a", withUser), newStore(t, srv, "node-b", withUser)
	la := acquireUnits(t, a, "A", dbUnit)
	la, err := a.RenewUnits(bg, "A", dbUnit, la)
	if err != nil {
		t.Fatal(err)
	}
	if o := observeUnits(t, b, "B", dbUnit); otherOf(o).Lease != "A" {
		t.Fatalf("B observes %+v", o)
	}
	if _, err := a.ReleaseUnits(bg, "A", dbUnit, la); err != nil {
		t.Fatal(err)
	}
	acquireUnits(t, b, "B", dbUnit)
}

func writePassword(t *testing.T, pw string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(path, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// A unit key's value decodes only if it is exactly what EncodeUnit writes
// for the record and lease it decodes to; anything else is garbage with
// its bytes alone.
func FuzzDecodeUnit(f *testing.F) {
	r := policy.Record{Present: true, Holder: "node-a", Version: 3, Token: goodToken, LeaseSpan: 36072 * time.Millisecond}
	f.Add(EncodeUnit("vpn", r))
	f.Add(EncodeUnit(`a\b`, r))
	f.Add(`{"lease":"A\",` + Encode(r)[1:])
	f.Add(`{"lease":"A","holder":"node-a"}`)
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := DecodeUnit("k", "u.service", raw)
		if err != nil {
			if !errors.Is(err, ErrGarbage) || got != (policy.Record{Present: true, Raw: raw}) {
				t.Fatalf("%q: %+v %v", raw, got, err)
			}
			return
		}
		if enc := EncodeUnit(otherOf(got).Lease, got); enc != raw || got.Raw != raw || otherOf(got).Unit != "u.service" {
			t.Fatalf("%q decodes to %+v, which encodes as %q", raw, got, enc)
		}
	})
}

// otherOf is the other lease a record is marked with (zero: none).
func otherOf(r policy.Record) policy.OtherLease {
	if r.Other == nil {
		return policy.OtherLease{}
	}
	return *r.Other
}

// An acquisition reports whether it claimed a missing unit key (Fresh):
// over a lease whose record another node wrote with other units, yes;
// over this lease's released record, whose unit keys mirror it, no.
func TestAcquisitionSaysWhenItClaimedAMissingUnitKey(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a, b := newStore(t, srv, "node-a"), newStore(t, srv, "node-b")
	la := acquireUnits(t, a, "B", dbUnit)
	rel, err := a.ReleaseUnits(bg, "B", dbUnit, la)
	if err != nil {
		t.Fatal(err)
	}
	units := []string{"db.service", "web.service"} // web.service's key is missing
	lb, err := b.AcquireUnits(bg, "B", units, observeUnits(t, b, "B", units))
	if err != nil || !lb.Fresh {
		t.Fatalf("acquire over %v claiming web.service's missing key: %+v %v, want Fresh", rel, lb, err)
	}
	rel, err = b.ReleaseUnits(bg, "B", units, lb)
	if err != nil {
		t.Fatal(err)
	}
	la, err = a.AcquireUnits(bg, "B", units, observeUnits(t, a, "B", units))
	if err != nil || la.Fresh {
		t.Fatalf("acquire over %v, every unit key mirroring it: %+v %v, want not Fresh", rel, la, err)
	}
}
