package unitctl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// states reads the state of units in one call. A unit systemd does not
// know reads as inactive.
func (s *Systemd) states(ctx context.Context, units ...string) (map[string]UnitState, error) {
	var list []sd.UnitStatus
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		list, err = c.ListUnitsByNamesContext(ctx, units)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]UnitState, len(list))
	for _, u := range list {
		out[strings.Clone(u.Name)] = UnitState{ActiveState: intern(u.ActiveState), SubState: intern(u.SubState), JobID: u.JobId, JobType: intern(u.JobType)}
	}
	return out, nil
}

// interned are the states and job types systemd reports most.
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{"", "active", "reloading", "inactive", "failed", "activating", "deactivating",
		"dead", "running", "exited", "start", "stop", "restart", "auto-restart", "start-pre", "stop-sigterm", "stop-sigkill", "stop-post"} {
		m[s] = s
	}
	return m
}()

// intern returns a copy of s that does not share memory with the D-Bus
// message it came from: godbus decodes a message's strings into one
// buffer, and a state kept for long (a watch's last state of every unit)
// would keep every buffer alive.
func intern(s string) string {
	if i, ok := interned[s]; ok {
		return i
	}
	return strings.Clone(s)
}

// state reads the state of one unit. Reads asked for while another is in
// flight go out together in one call (stateReads): a daemon that starts
// with a thousand units asks for a thousand states at once.
func (s *Systemd) state(ctx context.Context, unit string) (UnitState, error) {
	r := &stateRead{ctx: ctx, unit: unit, done: make(chan struct{})}
	s.reads.mu.Lock()
	s.reads.queued = append(s.reads.queued, r)
	if !s.reads.running {
		s.reads.running = true
		go s.readStates()
	}
	s.reads.mu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return UnitState{}, unanswered(ctx, nil)
	}
	switch {
	case r.found:
		return r.st, nil
	case r.err != nil && ctx.Err() != nil:
		return r.st, r.err
	}
	// Not reported under its own name, or the batch ended at another
	// read's earlier deadline: once more, alone.
	return s.stateAlone(ctx, unit)
}

// stateReads are the reads of state waiting for the next call.
type stateReads struct {
	mu      sync.Mutex
	queued  []*stateRead
	running bool         // readStates is running
	calls   atomic.Int64 // calls made, for tests
}

type stateRead struct {
	ctx   context.Context
	unit  string
	st    UnitState
	found bool // reported under this name
	err   error
	done  chan struct{}
}

// readStates answers the queued reads, a batch per call, until none is
// left. A batch's call ends at the earliest deadline among its reads.
func (s *Systemd) readStates() {
	for {
		s.reads.mu.Lock()
		batch := s.reads.queued
		s.reads.queued = nil
		if len(batch) == 0 {
			s.reads.running = false
			s.reads.mu.Unlock()
			return
		}
		s.reads.mu.Unlock()
		var (
			units    []string
			deadline time.Time
		)
		for _, r := range batch {
			if r.ctx.Err() != nil {
				continue
			}
			units = append(units, r.unit)
			if d, ok := r.ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
				deadline = d
			}
		}
		var states map[string]UnitState
		var err error
		if len(units) > 0 {
			ctx, cancel := s.life, context.CancelFunc(func() {})
			if !deadline.IsZero() {
				ctx, cancel = context.WithDeadline(s.life, deadline)
			}
			states, err = s.states(ctx, units...)
			cancel()
			s.reads.calls.Add(1)
		}
		for _, r := range batch {
			r.st, r.found = states[r.unit]
			r.err = err
			close(r.done)
		}
	}
}

// stateAlone reads one unit's state in a call of its own, so that a unit
// systemd reports under another of its names is found.
func (s *Systemd) stateAlone(ctx context.Context, unit string) (UnitState, error) {
	m, err := s.states(ctx, unit)
	if err != nil {
		return UnitState{}, err
	}
	if st, ok := m[unit]; ok {
		return st, nil
	}
	for _, st := range m { // reported under another of its names
		return st, nil
	}
	return UnitState{}, fmt.Errorf("unitctl: systemd did not report %s", unit)
}

// ActiveState returns the unit's ActiveState: active, reloading, inactive,
// failed, activating or deactivating.
func (s *Systemd) ActiveState(ctx context.Context, unit string) (string, error) {
	st, err := s.state(ctx, unit)
	return st.ActiveState, err
}

// State returns the unit's ActiveState, SubState and queued job.
func (s *Systemd) State(ctx context.Context, unit string) (UnitState, error) {
	return s.state(ctx, unit)
}

// serviceResult reads a service's Result= (success, exit-code, signal,
// timeout, ...), for error messages; "" if it cannot be read.
func (s *Systemd) serviceResult(ctx context.Context, unit string) string {
	if !strings.HasSuffix(unit, ".service") {
		return ""
	}
	var p *sd.Property
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		p, err = c.GetServicePropertyContext(ctx, unit, "Result")
		return err
	})
	if err != nil {
		return ""
	}
	r, _ := p.Value.Value().(string)
	return r
}

// TimeoutAbort reads a service's TimeoutAbortSec=: how long systemd waits
// after a watchdog's SIGABRT before SIGKILL.
func (s *Systemd) TimeoutAbort(ctx context.Context, unit string) (time.Duration, error) {
	return s.serviceDuration(ctx, unit, "TimeoutAbortUSec")
}

// ServiceWatchdogs reads the manager's ServiceWatchdogs property: false
// after `systemctl service-watchdogs no` (or systemd.service_watchdogs=0),
// when systemd ignores every service's watchdog timeout.
func (s *Systemd) ServiceWatchdogs(ctx context.Context) (bool, error) {
	v, err := s.managerProperty(ctx, "ServiceWatchdogs")
	if err != nil {
		return false, err
	}
	on, ok := v.Value().(bool)
	if !ok {
		return false, fmt.Errorf("unitctl: the manager's ServiceWatchdogs is %v", v)
	}
	return on, nil
}

// managerProperty reads one property of systemd's Manager interface.
func (s *Systemd) managerProperty(ctx context.Context, name string) (dbus.Variant, error) {
	var v dbus.Variant
	err := s.with(ctx, func(c *sd.Conn) error {
		bus, err := s.busOf(c)
		if err != nil {
			return err
		}
		return bus.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
			CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager", name).Store(&v)
	})
	if err != nil {
		return dbus.Variant{}, fmt.Errorf("unitctl: read the manager's %s: %w", name, err)
	}
	return v, nil
}

// Watchdog reads a service's WatchdogSec= (0: none).
func (s *Systemd) Watchdog(ctx context.Context, unit string) (time.Duration, error) {
	return s.serviceDuration(ctx, unit, "WatchdogUSec")
}

// serviceDuration reads a Service property in microseconds.
func (s *Systemd) serviceDuration(ctx context.Context, unit, name string) (time.Duration, error) {
	var p *sd.Property
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		p, err = c.GetServicePropertyContext(ctx, unit, name)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("unitctl: %s of %s: %w", name, unit, err)
	}
	us, ok := p.Value.Value().(uint64)
	if !ok {
		return 0, fmt.Errorf("unitctl: %s of %s is %v", name, unit, p.Value)
	}
	if us == math.MaxUint64 { // infinity
		return math.MaxInt64, nil
	}
	return time.Duration(us) * time.Microsecond, nil
}

// ControlGroup is a service's cgroup as systemd reports it (relative to
// the cgroup root systemd sees), "" while it has none.
func (s *Systemd) ControlGroup(ctx context.Context, unit string) (string, error) {
	var p *sd.Property
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		p, err = c.GetServicePropertyContext(ctx, unit, "ControlGroup")
		return err
	})
	if err != nil {
		return "", fmt.Errorf("unitctl: ControlGroup of %s: %w", unit, err)
	}
	cg, _ := p.Value.Value().(string)
	return cg, nil
}

// unitProperty reads one property of the Unit interface.
func (s *Systemd) unitProperty(ctx context.Context, unit, name string) (dbus.Variant, error) {
	var p *sd.Property
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		p, err = c.GetUnitPropertyContext(ctx, unit, name)
		return err
	})
	if err != nil {
		return dbus.Variant{}, err
	}
	return p.Value, nil
}

// readSettings reads what validation needs, in one call:
// Properties.GetAll with an empty interface name, which systemd answers
// with the properties of every interface of the unit (the Unit
// interface's and, for a service, the Service interface's): one call,
// not one per interface.
func (s *Systemd) readSettings(ctx context.Context, unit string) (settings, error) {
	var props map[string]any
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		props, err = s.allProperties(ctx, c, unit)
		return err
	})
	if err != nil {
		return settings{}, fmt.Errorf("unitctl: read the settings of %s: %w", unit, err)
	}
	var svc map[string]any // a socket's KillMode= is not a service's
	if strings.HasSuffix(unit, ".service") {
		svc = props
	}
	return decodeSettings(unit, props, svc)
}

// errNoRef: the link cannot hold units (see link.noRef).
var errNoRef = errors.New("unitctl: systemd does not take a Unit.Ref on this connection")

// settingsUnitProps are the properties of the Unit interface that
// validation reads when a scan of the links (Links) has ruled the unit's
// UnitFileState out of the states it refuses: every one decodeSettings
// takes but UnitFileState, and Names for the scan's check.
var settingsUnitProps = []string{"Id", "Names", "LoadState", "FragmentPath", "DropInPaths",
	"WantedBy", "RequiredBy", "UpheldBy", "TriggeredBy", "BoundBy", "OnFailureOf", "OnSuccessOf",
	"BindsTo", "After", "RefuseManualStart", "RefuseManualStop"}

// readSettingsKnowing reads what validation needs, as readSettings does,
// but without UnitFileState when links shows that no link can tie the
// unit (see Links): the unit is held loaded with Ref while its Unit
// properties are read one by one, together (systemd would load it anew
// for each read otherwise), with the Service interface's in one GetAll.
// Where links cannot rule it out, or anything here fails, it reads as
// readSettings does. UnitFileState is then "", which validation does not
// refuse: no link ties the unit, so it is none of the states refused.
func (s *Systemd) readSettingsKnowing(ctx context.Context, unit string, links *Links) (settings, error) {
	if links == nil {
		return s.readSettings(ctx, unit)
	}
	var u, svc map[string]any
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		u, svc, err = s.unitPropsHeld(ctx, c, unit, settingsUnitProps, strings.HasSuffix(unit, ".service"))
		return err
	})
	if err == nil && !links.mayTie(append(strs(u, "Names"), str(u, "Id")), str(u, "FragmentPath")) {
		return decodeSettings(unit, u, svc)
	}
	st, err := s.readSettings(ctx, unit)
	if err != nil || st.LoadState != "loaded" || slices.Contains(enabledStates, st.UnitFileState) {
		return st, err
	}
	// systemd keeps a loaded unit's UnitFileState until a reload: a link
	// made since (by hand, or systemctl enable --no-reload) shows in the
	// manager's GetUnitFileState, which works it out afresh.
	fresh, err := s.unitFileState(ctx, st.ID)
	if err != nil {
		return settings{}, err
	}
	if slices.Contains(enabledStates, fresh) {
		st.UnitFileState = fresh
	}
	return st, nil
}

// unitFileState is the manager's GetUnitFileState of unit: worked out
// from the unit directories on every call.
func (s *Systemd) unitFileState(ctx context.Context, unit string) (string, error) {
	var state string
	err := s.with(ctx, func(c *sd.Conn) error {
		bus, err := s.busOf(c)
		if err != nil {
			return err
		}
		return bus.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1").
			CallWithContext(ctx, "org.freedesktop.systemd1.Manager.GetUnitFileState", 0, unit).Store(&state)
	})
	if err != nil {
		return "", fmt.Errorf("unitctl: read the unit file state of %s: %w", unit, err)
	}
	return state, nil
}

// unitPropsHeld reads props of unit's Unit interface and, if service,
// every property of its Service interface, all sent at once, with the
// unit held by a Ref: systemd unloads a unit that nothing holds after
// each call, and would load it anew for every one. A property systemd
// does not know (an older systemd) is left out, as GetAll leaves it out.
func (s *Systemd) unitPropsHeld(ctx context.Context, c *sd.Conn, unit string, props []string, service bool) (u, svc map[string]any, err error) {
	l, err := s.linkOf(c)
	if err != nil {
		return nil, nil, err
	}
	if l.noRef.Load() {
		return nil, nil, errNoRef
	}
	obj := l.events.Object("org.freedesktop.systemd1", dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sd.PathBusEscape(unit)))
	if err := obj.CallWithContext(ctx, "org.freedesktop.systemd1.Unit.Ref", 0).Err; err != nil {
		switch dbusErrorName(err) {
		case "", "org.freedesktop.systemd1.NoSuchUnit", "org.freedesktop.DBus.Error.UnknownObject",
			"org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout",
			"org.freedesktop.DBus.Error.TimedOut", "org.freedesktop.DBus.Error.LimitsExceeded":
		default:
			l.noRef.Store(true) // refused on this link: no more tries on it
		}
		return nil, nil, err
	}
	defer obj.CallWithContext(ctx, "org.freedesktop.systemd1.Unit.Unref", 0) // if ctx ended, the ref goes with the connection
	n := len(props)
	if service {
		n++
	}
	done := make(chan *dbus.Call, n)
	gets := make([]*dbus.Call, len(props))
	for i, name := range props {
		gets[i] = obj.GoWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, done, "org.freedesktop.systemd1.Unit", name)
	}
	var all *dbus.Call
	if service {
		all = obj.GoWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, done, "org.freedesktop.systemd1.Service")
	}
	for range n {
		<-done
	}
	u = make(map[string]any, len(props))
	for i, call := range gets {
		var v dbus.Variant
		if err := call.Store(&v); err != nil {
			if dbusErrorName(err) == "org.freedesktop.DBus.Error.UnknownProperty" {
				continue
			}
			return nil, nil, err
		}
		u[props[i]] = v.Value()
	}
	if all != nil {
		var vs map[string]dbus.Variant
		if err := all.Store(&vs); err != nil {
			return nil, nil, err
		}
		svc = make(map[string]any, len(vs))
		for k, v := range vs {
			svc[k] = v.Value()
		}
	}
	return u, svc, nil
}

// inEffectUnitProps are the properties of the Unit interface that
// verification (Plan.verify) reads: where the unit's files are, and
// BindsTo= and After=.
var inEffectUnitProps = []string{"FragmentPath", "DropInPaths", "BindsTo", "After"}

// readInEffect reads what verification needs: the Unit properties of
// inEffectUnitProps and every Service property, with the unit held
// loaded (unitPropsHeld). Not the Unit interface's GetAll: it has systemd
// work out UnitFileState, which it does on each read after a reload by
// looking through the unit directories for links to the unit (about 80%
// of what reading all of a unit's settings costs systemd,
// BenchmarkNodeReadSettings, and more the more units and drop-ins there
// are), and verification does not need it. If the unit cannot be held,
// the properties are read one call each. The other fields of the
// settings are left zero.
func (s *Systemd) readInEffect(ctx context.Context, unit string) (settings, error) {
	var u, svc map[string]any
	service := strings.HasSuffix(unit, ".service")
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		u, svc, err = s.unitPropsHeld(ctx, c, unit, inEffectUnitProps, service)
		if err == nil || ctx.Err() != nil {
			return err
		}
		u = make(map[string]any, len(inEffectUnitProps))
		for _, name := range inEffectUnitProps {
			p, err := c.GetUnitPropertyContext(ctx, unit, name)
			if err != nil {
				return err
			}
			u[name] = p.Value.Value()
		}
		if service {
			svc, err = c.GetUnitTypePropertiesContext(ctx, unit, "Service")
		}
		return err
	})
	if err != nil {
		return settings{}, fmt.Errorf("unitctl: read the settings of %s: %w", unit, err)
	}
	return decodeSettings(unit, u, svc)
}

// allProperties is one GetAll of every interface of unit's object, on c.
func (s *Systemd) allProperties(ctx context.Context, c *sd.Conn, unit string) (map[string]any, error) {
	bus, err := s.busOf(c)
	if err != nil {
		return nil, err
	}
	obj := bus.Object("org.freedesktop.systemd1", dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sd.PathBusEscape(unit)))
	var vs map[string]dbus.Variant
	if err := obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, "").Store(&vs); err != nil {
		return nil, err
	}
	props := make(map[string]any, len(vs))
	for k, v := range vs {
		props[k] = v.Value()
	}
	return props, nil
}

// decodeSettings takes the settings from the properties of the Unit
// interface (u) and of the Service interface (svc, nil for a unit that is
// no service).
func decodeSettings(unit string, u, svc map[string]any) (settings, error) {
	st := settings{
		ID: str(u, "Id"), LoadState: str(u, "LoadState"), UnitFileState: str(u, "UnitFileState"),
		FragmentPath: str(u, "FragmentPath"), DropInPaths: strs(u, "DropInPaths"),
		WantedBy: strs(u, "WantedBy"), RequiredBy: strs(u, "RequiredBy"),
		UpheldBy: strs(u, "UpheldBy"), TriggeredBy: strs(u, "TriggeredBy"), BoundBy: strs(u, "BoundBy"),
		OnFailureOf: strs(u, "OnFailureOf"), OnSuccessOf: strs(u, "OnSuccessOf"),
		BindsTo: strs(u, "BindsTo"), After: strs(u, "After"),
		RefuseManualStart: boolean(u, "RefuseManualStart"), RefuseManualStop: boolean(u, "RefuseManualStop"),
		Type: str(svc, "Type"), BusName: str(svc, "BusName"), RemainAfterExit: boolean(svc, "RemainAfterExit"),
		KillMode: str(svc, "KillMode"), SendSIGKILL: boolean(svc, "SendSIGKILL"),
		TimeoutStopUSec: u64(svc, "TimeoutStopUSec"), TimeoutStopFailureMode: str(svc, "TimeoutStopFailureMode"),
		FinalKillSignal: i32(svc, "FinalKillSignal"),
	}
	for _, e := range []struct {
		prop string
		into *[]execCommand
	}{{"ExecStartPreEx", &st.ExecStartPre}, {"ExecStopEx", &st.ExecStop}, {"ExecStopPostEx", &st.ExecStopPost}} {
		if v, ok := svc[e.prop]; ok {
			if err := dbus.Store([]any{v}, e.into); err != nil {
				return settings{}, fmt.Errorf("unitctl: %s: %s: %w", unit, e.prop, err)
			}
			for i := range *e.into {
				c := &(*e.into)[i]
				c.Path, c.Argv, c.Flags = strings.Clone(c.Path), cloneAll(c.Argv), cloneAll(c.Flags)
			}
		}
	}
	return st, nil
}

// str, strs and decodeSettings copy the strings they return (as intern
// does): a Plan keeps some of them until every unit's drop-in is in
// effect, and at 5,000 units the message buffers they would keep alive
// were 33 MB.
func str(m map[string]any, k string) string {
	v, _ := m[k].(string)
	return intern(v)
}

func strs(m map[string]any, k string) []string {
	v, _ := m[k].([]string)
	return cloneAll(v)
}

// cloneAll returns a copy of l whose strings are copies too.
func cloneAll(l []string) []string {
	if l == nil {
		return nil
	}
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strings.Clone(s)
	}
	return out
}

func boolean(m map[string]any, k string) bool {
	v, _ := m[k].(bool)
	return v
}

func i32(m map[string]any, k string) int32 {
	v, _ := m[k].(int32)
	return v
}

func u64(m map[string]any, k string) uint64 {
	v, _ := m[k].(uint64)
	return v
}
