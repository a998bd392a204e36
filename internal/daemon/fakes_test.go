package daemon

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// memStore is the lease store in memory, with the scripts' semantics,
// for one node ("node-a"): every lease key, by name.
type memStore struct {
	mu       sync.Mutex
	raw      map[string]string // "": missing
	tokens   int
	disabled map[string]bool           // leases `unitlease disable` marked
	mine     []redislease.Announcement // what node-a announces
	peers    []redislease.Announcement // what the tests make other nodes announce

	releases    map[string]redislease.Release    // the release notes
	transitions map[string]redislease.Transition // the transition notes
	failures    map[string]int                   // node-a's failure counts as noted
}

func newMemStore() *memStore { return &memStore{raw: map[string]string{}} }

func (f *memStore) current(name string) policy.Record {
	raw := f.raw[name]
	if raw == "" {
		return policy.Absent
	}
	rec, _ := redislease.Decode(name, raw)
	return rec
}

func (f *memStore) write(name string, r policy.Record) policy.Record {
	f.raw[name] = redislease.Encode(r)
	return f.current(name)
}

// steal makes node the holder of a lease's record, as after a partition.
func (f *memStore) steal(name, node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.current(name)
	cur.Holder, cur.Version, cur.Token, cur.Released = node, cur.Version+1, strings.Repeat("b", 32), false
	f.write(name, cur)
}

// record is the lease's record now.
func (f *memStore) record(name string) policy.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current(name)
}

func (f *memStore) Observe(_ context.Context, name string) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current(name), nil
}

func (f *memStore) Acquire(_ context.Context, name string, seen policy.Record) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur := f.current(name)
	if f.disabled[name] { // as the acquire script
		return policy.Record{}, redislease.ErrDisabled
	}
	if !seen.Same(cur) {
		return policy.Record{}, &redislease.ConflictError{Key: name, Current: cur}
	}
	f.tokens++
	return f.write(name, policy.Record{Holder: "node-a", Version: seen.Version + 1, Token: fmt.Sprintf("%032x", f.tokens)}), nil
}

func (f *memStore) owned(name string, held policy.Record) (policy.Record, error) {
	cur := f.current(name)
	switch {
	case !cur.Present:
		return cur, redislease.ErrMissing
	case cur.Released || cur.Holder != held.Holder || cur.Token != held.Token || cur.Version != held.Version:
		return cur, &redislease.LostError{Key: name, Current: cur}
	}
	return cur, nil
}

func (f *memStore) Renew(_ context.Context, name string, held policy.Record) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, err := f.owned(name, held)
	if err != nil {
		return policy.Record{}, err
	}
	cur.Version++
	return f.write(name, cur), nil
}

func (f *memStore) Release(_ context.Context, name string, held policy.Record) (policy.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, err := f.owned(name, held)
	if err != nil {
		return policy.Record{}, err
	}
	cur.Version++
	cur.Released = true
	cur.Next = held.Next
	return f.write(name, cur), nil
}

func (f *memStore) Watchers(context.Context, string) (int, error) { return 2, nil }

func (f *memStore) Wakeups(ctx context.Context, _ []string) <-chan redislease.Wake {
	ch := make(chan redislease.Wake)
	context.AfterFunc(ctx, func() { close(ch) })
	return ch
}

func (f *memStore) List(context.Context) ([]redislease.Entry, error) { return nil, nil }

func (f *memStore) Durability(context.Context) redislease.Durability { return redislease.Durability{} }

func (f *memStore) Ping(context.Context) error { return nil }

func (f *memStore) SetAnnouncements(_ context.Context, as []redislease.Announcement) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mine = slices.Clone(as)
	return nil
}

// announce makes other nodes announce as.
func (f *memStore) announce(as ...redislease.Announcement) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peers = as
}

// announced is what node-a announces now.
func (f *memStore) announced() []redislease.Announcement {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mine)
}

func (f *memStore) Announcements(context.Context) ([]redislease.Announcement, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Concat(f.mine, f.peers), nil
}

func (f *memStore) Announced(ctx context.Context, lease, node string) (string, error) {
	as, _ := f.Announcements(ctx)
	state := ""
	for _, a := range as {
		switch {
		case a.Node == node && a.Lease == "" && a.State == redislease.AnnounceDrained:
			return a.State, nil
		case a.Node == node && a.Lease == lease:
			state = a.State
		}
	}
	return state, nil
}

func (f *memStore) DisabledAmong(_ context.Context, leases []string) (map[string]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]bool{}
	for _, l := range leases {
		if f.disabled[l] {
			out[l] = true
		}
	}
	return out, nil
}

func (f *memStore) DisabledLeases(context.Context) ([]redislease.Disabled, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []redislease.Disabled
	for _, l := range slices.Sorted(maps.Keys(f.disabled)) {
		out = append(out, redislease.Disabled{Lease: l, By: "op"})
	}
	return out, nil
}

func (f *memStore) NoteRelease(_ context.Context, lease string, version uint64, why string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.releases == nil {
		f.releases = map[string]redislease.Release{}
	}
	f.releases[lease] = redislease.Release{By: "node-a", Version: version, Why: why}
	return nil
}

func (f *memStore) LastRelease(_ context.Context, lease string) (*redislease.Release, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.releases[lease]
	if !ok {
		return nil, nil
	}
	return &r, nil
}

func (f *memStore) Releases(_ context.Context, leases []string) (map[string]redislease.Release, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]redislease.Release{}
	for _, l := range leases {
		if r, ok := f.releases[l]; ok {
			out[l] = r
		}
	}
	return out, nil
}

func (f *memStore) NoteTransition(_ context.Context, lease string, t redislease.Transition) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.transitions == nil {
		f.transitions = map[string]redislease.Transition{}
	}
	f.transitions[lease] = t
	return nil
}

func (f *memStore) Transitions(_ context.Context, leases []string) (map[string]redislease.Transition, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]redislease.Transition{}
	for _, l := range leases {
		if t, ok := f.transitions[l]; ok {
			out[l] = t
		}
	}
	return out, nil
}

func (f *memStore) NoteFailures(_ context.Context, lease string, count int, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failures == nil {
		f.failures = map[string]int{}
	}
	f.failures[lease] = count
	return nil
}

func (f *memStore) Failures(context.Context) (map[string][]redislease.NodeFailures, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]redislease.NodeFailures{}
	for l, n := range f.failures {
		if n > 0 {
			out[l] = []redislease.NodeFailures{{Node: "node-a", Count: n}}
		}
	}
	return out, nil
}

// disable marks lease disabled (or enabled, with on false), as
// `unitlease disable` would.
func (f *memStore) disable(lease string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.disabled == nil {
		f.disabled = map[string]bool{}
	}
	if on {
		f.disabled[lease] = true
	} else {
		delete(f.disabled, lease)
	}
}

func (f *memStore) ReadyAmong(ctx context.Context, nodes map[string][]string) (map[string][]string, error) {
	out := map[string][]string{}
	for lease, ns := range nodes {
		for _, n := range ns {
			if st, _ := f.Announced(ctx, lease, n); st == redislease.AnnounceReady {
				out[lease] = append(out[lease], n)
			}
		}
	}
	return out, nil
}

// fakeSystemd is systemd for the daemon's tests: the annotated units
// (unit -> lease), their states, and units whose stop fails (they stay
// active, as a process in uninterruptible sleep would keep them).
type fakeSystemd struct {
	mu          sync.Mutex
	annotated   map[string]string // unit -> lease
	active      map[string]bool
	stuck       map[string]bool          // Stop fails
	slow        map[string]chan struct{} // Stop waits for the channel to close: systemd answers late
	slowCheck   chan struct{}            // Validate waits for it to close, if set
	slowInstall chan struct{}            // Install waits for it to close, if set
	badDropIn   map[string]bool          // Install fails the unit's drop-in
	installed   []string                 // the units of every Install, in order
	holdCheck   map[string]chan struct{} // Install reports the unit checked once its channel closes
	refused     map[string]bool          // Validate refuses
	validated   int                      // Validate calls
	uninstalled []string
	jobs        map[string]string                    // unit -> the type of its queued job
	events      chan unitctl.Event                   // what Watch reports
	env         map[string][][2]string               // the environment each unit was last started with
	keys        map[string]func(*unitctl.Annotation) // unit -> sets its annotation's other keys

	watchdogsOff atomic.Bool // systemctl service-watchdogs no
}

func newFakeSystemd(annotated map[string]string) *fakeSystemd {
	return &fakeSystemd{annotated: annotated, active: map[string]bool{}, stuck: map[string]bool{}, refused: map[string]bool{}, jobs: map[string]string{}, events: make(chan unitctl.Event)}
}

func (f *fakeSystemd) set(fn func(*fakeSystemd)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeSystemd) isActive(unit string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.active[unit]
}

func (f *fakeSystemd) Start(_ context.Context, unit string) error {
	f.set(func(f *fakeSystemd) { f.active[unit] = true })
	return nil
}

func (f *fakeSystemd) Stop(_ context.Context, unit string, stopWait time.Duration) error {
	f.mu.Lock()
	slow := f.slow[unit]
	f.mu.Unlock()
	if slow != nil {
		<-slow
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stuck[unit] && f.active[unit] {
		return fmt.Errorf("%s: %w", unit, unitctl.ErrStopFailed)
	}
	f.active[unit] = false
	return nil
}

func (f *fakeSystemd) ActiveState(_ context.Context, unit string) (string, error) {
	if f.isActive(unit) {
		return "active", nil
	}
	return "inactive", nil
}

// WriteEnv records each unit's environment as it would be written.
func (f *fakeSystemd) WriteEnv(_ unitctl.Config, unit string, env [][2]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.env == nil {
		f.env = map[string][][2]string{}
	}
	f.env[unit] = env
	return nil
}

// State fails on an ended ctx, as a D-Bus call does.
func (f *fakeSystemd) State(ctx context.Context, unit string) (unitctl.UnitState, error) {
	if err := ctx.Err(); err != nil {
		return unitctl.UnitState{}, err
	}
	st, err := f.ActiveState(ctx, unit)
	f.mu.Lock()
	defer f.mu.Unlock()
	return unitctl.UnitState{ActiveState: st, JobType: f.jobs[unit]}, err
}

func (f *fakeSystemd) StartOrder(_ context.Context, units []string) ([]string, error) {
	return units, nil
}

func (f *fakeSystemd) Discover(context.Context, ...string) ([]unitctl.Annotation, []error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var anns []unitctl.Annotation
	for u, l := range f.annotated {
		a := unitctl.Annotation{Unit: u, Lease: l}
		a.SetDefaults()
		if set := f.keys[u]; set != nil {
			set(&a)
		}
		anns = append(anns, a)
	}
	slices.SortFunc(anns, func(a, b unitctl.Annotation) int { return strings.Compare(a.Unit, b.Unit) })
	return anns, nil
}

func (f *fakeSystemd) ScanLinks(context.Context) (*unitctl.Links, error) { return nil, nil }

func (f *fakeSystemd) Validate(_ context.Context, unit string, _ unitctl.Config, _ *unitctl.Links) (*unitctl.Plan, error) {
	f.mu.Lock()
	slow := f.slowCheck
	f.mu.Unlock()
	if slow != nil {
		<-slow
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.validated++
	if f.refused[unit] {
		return nil, &unitctl.RefusedError{Unit: unit, Reasons: []string{"KillMode=process (set by an override)"}}
	}
	return &unitctl.Plan{Unit: unit}, nil
}

func (f *fakeSystemd) Install(_ context.Context, plans []*unitctl.Plan) (map[string]error, error) {
	f.mu.Lock()
	slow := f.slowInstall
	f.mu.Unlock()
	if slow != nil {
		<-slow
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var failed map[string]error
	for _, p := range plans {
		f.installed = append(f.installed, p.Unit)
		if f.badDropIn[p.Unit] {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[p.Unit] = fmt.Errorf("%s: %w: overridden by a later drop-in", p.Unit, unitctl.ErrDropIn)
		}
	}
	hold := f.holdCheck
	f.mu.Unlock()
	defer f.mu.Lock()
	// Checked in order, as the real one reports them: a unit in hold
	// waits for its channel before its check is reported.
	for _, p := range plans {
		if ch := hold[p.Unit]; ch != nil {
			<-ch
		}
		if failed[p.Unit] == nil && p.InEffect != nil {
			p.InEffect()
		}
	}
	return failed, nil
}

func (f *fakeSystemd) Recheck(context.Context, []*unitctl.Plan) (map[string]error, error) {
	return nil, nil
}

func (f *fakeSystemd) Uninstall(_ context.Context, _ unitctl.Config, units []string) error {
	f.set(func(f *fakeSystemd) { f.uninstalled = append(f.uninstalled, units...) })
	return nil
}

// Watch passes on what a test sends to events, while ctx lasts.
func (f *fakeSystemd) Watch(ctx context.Context, _ []string, _ time.Duration) <-chan unitctl.Event {
	ch := make(chan unitctl.Event)
	go func() {
		defer close(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-f.events:
				select {
				case ch <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

func (f *fakeSystemd) TimeoutAbort(context.Context, string) (time.Duration, error) {
	return 2 * time.Second, nil
}

// ServiceWatchdogs: systemd enforces service watchdogs, unless a test
// turned them off.
func (f *fakeSystemd) ControlGroup(_ context.Context, unit string) (string, error) {
	return "/system.slice/" + unit, nil
}

func (f *fakeSystemd) ServiceWatchdogs(context.Context) (bool, error) {
	return !f.watchdogsOff.Load(), nil
}

// Watchdog is the unit's WatchdogSec=: none set (the environment's counts).
func (f *fakeSystemd) Watchdog(context.Context, string) (time.Duration, error) {
	return 0, nil
}
