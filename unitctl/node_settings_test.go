package unitctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
)

// settingsUnits are units whose settings differ in every way validation
// reads them: a service with stop commands, a kill mode and a timeout of
// its own, a plain one, one that is running, and a socket (no service).
var settingsUnits = map[string]string{
	"ul-set-rich.service": "[Unit]\nAfter=ul-set-plain.service\nRefuseManualStop=yes\n" +
		"[Service]\nType=notify\nExecStartPre=/bin/true pre one\nExecStartPre=-/bin/true pre two\n" +
		"ExecStart=/bin/sleep infinity\nExecStop=/bin/kill -TERM $MAINPID\nExecStopPost=/bin/true post\n" +
		"KillMode=mixed\nTimeoutStopSec=7\nRemainAfterExit=yes\nSendSIGKILL=yes\n",
	"ul-set-plain.service":   plainService,
	"ul-set-running.service": plainService,
	"ul-set.socket":          "[Socket]\nListenStream=/run/ul-set.sock\nKillMode=process\n",
}

// TestNodeSettingsOneRead: the settings read in one call (GetAll of every
// interface) are the ones read with a call per interface (Unit, then
// Service), for an inactive unit, a running one, a service with every
// setting validation reads set, and a socket, whose KillMode= is not
// taken for a service's.
func TestNodeSettingsOneRead(t *testing.T) {
	s := dialNode(t, Options{})
	installUnits(t, settingsUnits)
	systemctl(t, "start", "ul-set-running.service")
	ctx := ctxFor(t, time.Minute)
	for unit := range settingsUnits {
		one, err := s.readSettings(ctx, unit)
		if err != nil {
			t.Fatalf("readSettings(%s): %v", unit, err)
		}
		two, err := s.settingsPerInterface(ctx, unit)
		if err != nil {
			t.Fatalf("settingsPerInterface(%s): %v", unit, err)
		}
		one.sortSets()
		two.sortSets()
		if !reflect.DeepEqual(one, two) {
			t.Errorf("%s: one call read\n%+v\na call per interface read\n%+v", unit, one, two)
		}
	}
	rich, err := s.readSettings(ctx, "ul-set-rich.service")
	if err != nil {
		t.Fatal(err)
	}
	if rich.KillMode != "mixed" || rich.TimeoutStopUSec != 7e6 || len(rich.ExecStartPre) != 2 || len(rich.ExecStop) != 1 ||
		len(rich.ExecStopPost) != 1 || !rich.RefuseManualStop || rich.Type != "notify" || !rich.RemainAfterExit {
		t.Errorf("ul-set-rich.service read as %+v, want its own settings", rich)
	}
	sock, err := s.readSettings(ctx, "ul-set.socket")
	if err != nil {
		t.Fatal(err)
	}
	if sock.KillMode != "" || sock.ID != "ul-set.socket" {
		t.Errorf("ul-set.socket read as %+v, want its Id and no service's KillMode", sock)
	}
}

// sortSets sorts the lists that systemd keeps as sets (their order
// changes each time it loads the unit).
func (st *settings) sortSets() {
	for _, l := range [][]string{st.DropInPaths, st.WantedBy, st.RequiredBy, st.UpheldBy, st.TriggeredBy, st.BoundBy,
		st.OnFailureOf, st.OnSuccessOf, st.BindsTo, st.After} {
		slices.Sort(l)
	}
}

// TestNodeInEffectRead: verification reads less than validation (no
// UnitFileState) and finds the same: a drop-in in effect passes on both
// reads, and one defeated by a drop-in that sorts after it fails on both with the same
// problems, each named in the same file and line.
func TestNodeInEffectRead(t *testing.T) {
	unit := "ul-ine.service"
	s, _, p := managedUnit(t, unit, "[Service]\nExecStartPre=/bin/true own\nExecStart=/bin/sleep infinity\nExecStop=/bin/kill -TERM $MAINPID\nKillMode=mixed\n")
	ctx := ctxFor(t, time.Minute)
	both := func() (full, inEffect error) {
		t.Helper()
		all, err := s.readSettings(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		some, err := s.readInEffect(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		return p.verify(all), p.verify(some)
	}
	if full, inEffect := both(); full != nil || inEffect != nil {
		t.Fatalf("drop-in in effect: verify on the full read %v, on the read for verification %v", full, inEffect)
	}
	writeUnitFiles(t, map[string]string{
		unitDir + "/" + unit + ".d/zzz-defeat.conf": "[Service]\nExecStartPre=\nKillMode=process\nSendSIGKILL=no\nExecStopPost=/bin/true more\nTimeoutStopSec=10min\n",
	})
	systemctl(t, "daemon-reload")
	full, inEffect := both()
	if !errors.Is(full, ErrDropIn) || full.Error() != fmt.Sprint(inEffect) {
		t.Fatalf("defeated drop-in: verify on the full read\n%v\non the read for verification\n%v\nwant the same ErrDropIn", full, inEffect)
	}
	for _, w := range []string{"KillMode=process", "SendSIGKILL=no", "ExecStartPre=", "TimeoutStopSec=", "zzz-defeat.conf:"} {
		if !strings.Contains(full.Error(), w) {
			t.Errorf("defeated drop-in: %v\nwant it to contain %q", full, w)
		}
	}
}

// settingsPerInterface reads the settings with one GetAll per interface,
// as unitctl did before it read them in one call.
func (s *Systemd) settingsPerInterface(ctx context.Context, unit string) (settings, error) {
	var u, svc map[string]any
	err := s.with(ctx, func(c *sd.Conn) (err error) {
		u, err = c.GetUnitPropertiesContext(ctx, unit)
		if err == nil && strings.HasSuffix(unit, ".service") {
			svc, err = c.GetUnitTypePropertiesContext(ctx, unit, "Service")
		}
		return err
	})
	if err != nil {
		return settings{}, err
	}
	return decodeSettings(unit, u, svc)
}

// settingsBenchUnits is how many inactive services BenchmarkNodeReadSettings
// reads, settingsBenchRounds times each way.
const (
	settingsBenchUnits  = 60
	settingsBenchRounds = 5
)

// BenchmarkNodeReadSettings measures what reading the settings of units
// not loaded (inactive, as every unit is at the first discovery after
// boot) costs systemd and dbus-daemon in CPU, and the wall time, per
// unit: as validation reads them without a scan of the links (one
// call) and with one (knowing links: no UnitFileState, the Unit
// properties one by one with the unit held loaded), as it did before (a call
// per interface), as verification reads them (readInEffect: no
// UnitFileState), and UnitFileState alone, which systemd works out by
// looking through the unit directories. Each unit has a drop-in
// directory in /run, as a managed unit does. The reads go out
// ReadsInFlight at a time, as validation sends them. CPU comes from
// /proc (clock ticks), so it is summed over settingsBenchRounds rounds.
func BenchmarkNodeReadSettings(b *testing.B) {
	s := dialNode(b, Options{})
	files := map[string]string{}
	var units []string
	for i := range settingsBenchUnits {
		u := fmt.Sprintf("ul-setb-%03d.service", i)
		files[u] = settingsUnits["ul-set-rich.service"]
		files["/run/systemd/system/"+u+".d/50-bench.conf"] = "[Service]\nKillMode=mixed\n"
		units = append(units, u)
	}
	installUnits(b, files)
	dbusPID := pidOf(b, "dbus-daemon")
	ctx := context.Background()
	links, err := s.ScanLinks(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ways := []struct {
		name string
		read func(context.Context, string) (settings, error)
	}{
		{"one call", s.readSettings},
		{"knowing links", func(ctx context.Context, u string) (settings, error) { return s.readSettingsKnowing(ctx, u, links) }},
		{"per interface", s.settingsPerInterface},
		{"in effect", s.readInEffect},
		{"UnitFileState", func(ctx context.Context, u string) (settings, error) {
			_, err := s.unitProperty(ctx, u, "UnitFileState")
			return settings{}, err
		}},
	}
	for b.Loop() {
		var t strings.Builder
		row := "%-14s %14s %14s %12s\n"
		fmt.Fprintf(&t, "%d inactive services, %d rounds, %d reads in flight; per unit:\n", settingsBenchUnits, settingsBenchRounds, ReadsInFlight)
		fmt.Fprintf(&t, row, "", "systemd CPU", "dbus CPU", "wall")
		for _, w := range ways {
			s.ServiceWatchdogs(ctx) // whatever systemd had queued is done
			sys0, bus0, start := cpuOf(b, "1"), cpuOf(b, dbusPID), time.Now()
			for range settingsBenchRounds {
				Each(len(units), ReadsInFlight, func(i int) {
					if _, err := w.read(ctx, units[i]); err != nil {
						b.Error(err)
					}
				})
			}
			n := time.Duration(settingsBenchUnits * settingsBenchRounds)
			wall, sys, bus := time.Since(start)/n, (cpuOf(b, "1")-sys0)/n, (cpuOf(b, dbusPID)-bus0)/n
			fmt.Fprintf(&t, row, w.name, us(sys), us(bus), us(wall))
			b.ReportMetric(float64(sys)/1e3, strings.ReplaceAll(w.name, " ", "-")+"-systemd-µs/unit")
		}
		b.Log("\n" + t.String())
	}
}

func us(d time.Duration) string { return fmt.Sprintf("%d µs", d.Microseconds()) }

// cpuOf is the CPU time (user and system) process pid has used, in clock
// ticks of 10 ms.
func cpuOf(tb testing.TB, pid string) time.Duration {
	tb.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command's closing parenthesis: utime and
	// stime are the 14th and 15th of the line, the 12th and 13th here.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatalf("/proc/%s/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// pidOf is the PID of the process whose command name is comm.
func pidOf(tb testing.TB, comm string) string {
	tb.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if c, err := os.ReadFile(filepath.Join(d, "comm")); err == nil && strings.TrimSpace(string(c)) == comm {
			return filepath.Base(d)
		}
	}
	tb.Fatalf("no %s process", comm)
	return ""
}
