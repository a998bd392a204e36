package unitctl

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// privateSocket is systemd's direct D-Bus socket, for root.
const privateSocket = "unix:path=/run/systemd/private"

// link is one generation of connections to systemd: go-systemd's pair for
// method calls, and a connection of our own that receives PropertiesChanged
// of units and JobRemoved (go-systemd's job results are not used either:
// see jobResults). (go-systemd's own subscriber is not used:
// its dispatch goroutine reads the subscriber without the lock that
// SetPropertiesSubscriber takes, a data race, and it makes a GetUnit call
// for every JobRemoved.) When any of them breaks, the whole link is
// replaced.
type link struct {
	sd      *sd.Conn
	events  *dbus.Conn
	signals chan *dbus.Signal  // closed by godbus when events closes
	cancel  context.CancelFunc // ends the context the connections were opened with, which closes them
	// noRef: systemd refused a Unit.Ref on this link (a direct
	// connection to its private socket has no bus name to hold the
	// reference), so reads do without one
	noRef atomic.Bool
}

func (l *link) connected() bool { return l.sd.Connected() && l.events.Connected() }

func (l *link) close() {
	l.sd.Close()
	l.events.Close()
	l.cancel()
}

// dialTimeout bounds one attempt to connect. A connection accepted by
// systemd just before it re-executes may never be answered; the attempt
// is then abandoned and the caller's retry dials again.
const dialTimeout = 3 * time.Second

// dial opens a link and subscribes to unit events. go-systemd's
// constructor takes no context, and godbus closes a connection when the
// context it was opened with ends: so the connections get a context of
// their own, under s.life, and an attempt that does not finish in time is
// abandoned by cancelling it, which closes whatever it opened.
func (s *Systemd) dial(ctx context.Context) (*link, error) {
	type result struct {
		l   *link
		err error
	}
	conns, cancel := context.WithCancel(s.life)
	ch := make(chan result, 1)
	go func() {
		l, err := s.open(conns)
		ch <- result{l, err}
	}()
	timeout := time.NewTimer(dialTimeout)
	defer timeout.Stop()
	var err error
	select {
	case r := <-ch:
		if r.err == nil {
			r.l.cancel = cancel
			return r.l, nil
		}
		err = r.err
	case <-timeout.C:
		err = fmt.Errorf("no answer within %v", dialTimeout)
	case <-ctx.Done():
		err = ctx.Err()
	}
	cancel()
	return nil, fmt.Errorf("unitctl: connect to systemd: %w", err)
}

// open dials the system bus, or systemd's private socket if so configured
// or if the bus cannot be reached as root.
func (s *Systemd) open(ctx context.Context) (*link, error) {
	private := s.opts.Private
	l, err := openOver(ctx, private)
	if err != nil && !private && os.Geteuid() == 0 && ctx.Err() == nil {
		s.opts.Logf("unitctl: system bus: %v; using systemd's private socket", err)
		l, err = openOver(ctx, true)
	}
	return l, err
}

func openOver(ctx context.Context, private bool) (*link, error) {
	dial := func() (*dbus.Conn, error) { return dialBus(ctx, private) }
	c, err := sd.NewConnection(dial)
	if err != nil {
		return nil, err
	}
	events, err := dial()
	if err != nil {
		c.Close()
		return nil, err
	}
	l := &link{sd: c, events: events, signals: make(chan *dbus.Signal, 4096), cancel: func() {}}
	if err := l.subscribe(ctx, private); err != nil {
		l.close()
		return nil, err
	}
	return l, nil
}

// dialBus opens and authenticates one connection. On the bus it says
// Hello; systemd's private socket is a direct connection without one.
func dialBus(ctx context.Context, private bool) (*dbus.Conn, error) {
	var conn *dbus.Conn
	var err error
	if private {
		conn, err = dbus.Dial(privateSocket, dbus.WithContext(ctx))
	} else {
		conn, err = dbus.SystemBusPrivate(dbus.WithContext(ctx))
	}
	if err != nil {
		return nil, err
	}
	// EXTERNAL with the numeric uid: no user name lookup, which would need
	// cgo.
	err = conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))})
	switch {
	case err == nil && private:
		err = ping(ctx, conn)
	case err == nil:
		err = conn.Hello()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// ping reads systemd's version. On a fresh direct connection, systemd
// 252 was seen to leave a first Manager.Subscribe unanswered most of the
// time, and never a call made after one answered round trip.
func ping(ctx context.Context, conn *dbus.Conn) error {
	systemd := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	return systemd.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, "org.freedesktop.systemd1.Manager", "Version").Err
}

// subscribe routes units' PropertiesChanged and JobRemoved to l.signals
// and asks systemd to send them. On the bus match rules select the
// signals (of units, only their Unit interface's); a direct connection
// gets every signal of systemd.
func (l *link) subscribe(ctx context.Context, private bool) error {
	if !private {
		err := l.events.AddMatchSignalContext(ctx,
			dbus.WithMatchSender("org.freedesktop.systemd1"),
			dbus.WithMatchInterface("org.freedesktop.DBus.Properties"),
			dbus.WithMatchMember("PropertiesChanged"),
			dbus.WithMatchPathNamespace("/org/freedesktop/systemd1/unit"),
			// The Unit interface's changes only (unitChange reads no
			// other): each start or stop also changes the Service
			// interface's properties, a signal several times larger,
			// which the bus then neither routes nor the daemon decodes.
			dbus.WithMatchArg(0, "org.freedesktop.systemd1.Unit"))
		for _, member := range []string{"JobRemoved", "Reloading"} {
			if err == nil {
				err = l.events.AddMatchSignalContext(ctx,
					dbus.WithMatchSender("org.freedesktop.systemd1"),
					dbus.WithMatchInterface("org.freedesktop.systemd1.Manager"),
					dbus.WithMatchMember(member))
			}
		}
		if err != nil {
			return err
		}
	}
	l.events.Signal(l.signals)
	systemd := l.events.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	return systemd.CallWithContext(ctx, "org.freedesktop.systemd1.Manager.Subscribe", 0).Err
}

// reloaded reports whether sig is systemd's Reloading(false): a
// daemon-reload finished.
func reloaded(sig *dbus.Signal) bool {
	if sig.Name != "org.freedesktop.systemd1.Manager.Reloading" || len(sig.Body) < 1 {
		return false
	}
	active, ok := sig.Body[0].(bool)
	return ok && !active
}

// unitChange reads a PropertiesChanged signal of a unit's Unit interface:
// the unit's name and the changed properties.
func unitChange(sig *dbus.Signal) (string, map[string]dbus.Variant, bool) {
	if sig.Name != "org.freedesktop.DBus.Properties.PropertiesChanged" || len(sig.Body) < 2 {
		return "", nil, false
	}
	iface, _ := sig.Body[0].(string)
	props, ok := sig.Body[1].(map[string]dbus.Variant)
	dir, base := path.Split(string(sig.Path))
	if iface != "org.freedesktop.systemd1.Unit" || !ok || dir != "/org/freedesktop/systemd1/unit/" {
		return "", nil, false
	}
	return unescapeBusPath(base), props, true
}

// unescapeBusPath reverses sd.PathBusEscape: "_2e" is ".", "_" alone is
// the empty string.
func unescapeBusPath(s string) string {
	if s == "_" {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '_' && i+2 < len(s) {
			if c, err := hex.DecodeString(s[i+1 : i+3]); err == nil {
				b.Write(c)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
