package unitctl

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// benchRuns is how many starts and stops each median is taken over.
const benchRuns = 20

// BenchmarkNodeJobLatency measures, for a unit that exits at once on
// SIGTERM (Type=exec, so that active means the binary runs), Start until
// confirmed active and Stop until confirmed inactive, next to:
//
//   - the bare D-Bus job: StartUnit or StopUnit and its JobRemoved signal
//     on a plain go-systemd connection, the least any client waits;
//   - the unit's own state change as systemd timestamps it
//     (InactiveExit to ActiveEnter, ActiveExit to InactiveEnter);
//   - systemctl start or stop run from a shell.
//
// The figure to keep small is the overhead: unitctl minus the bare job.
// Each iteration takes medians of benchRuns runs; run it with
// -test.benchtime=1x.
func BenchmarkNodeJobLatency(b *testing.B) {
	s := dialNode(b, Options{})
	unit := "ul-bench.service"
	installUnits(b, map[string]string{unit: "[Unit]\nStartLimitIntervalSec=0\n[Service]\nType=exec\nExecStart=/bin/sleep infinity\n"})
	holdUnitLoaded(b, unit)
	bare := bareConn(b)
	ctx := context.Background()
	for b.Loop() {
		var m latencies
		for range benchRuns {
			m.start.unitctl = append(m.start.unitctl, timed(b, func() error { return s.Start(ctx, unit) }))
			m.start.states = append(m.start.states, s.jobTime(ctx, b, unit, "InactiveExit", "ActiveEnter"))
			m.stop.unitctl = append(m.stop.unitctl, timed(b, func() error { return s.Stop(ctx, unit, 10*time.Second) }))
			m.stop.states = append(m.stop.states, s.jobTime(ctx, b, unit, "ActiveExit", "InactiveEnter"))
			m.start.bare = append(m.start.bare, timed(b, func() error { return bareJob(ctx, bare.StartUnitContext, unit) }))
			m.stop.bare = append(m.stop.bare, timed(b, func() error { return bareJob(ctx, bare.StopUnitContext, unit) }))
			m.start.shell = append(m.start.shell, timed(b, systemctlTimed("start", unit)))
			m.stop.shell = append(m.stop.shell, timed(b, systemctlTimed("stop", unit)))
		}
		m.report(b)
	}
}

// holdUnitLoaded keeps systemd from unloading the unit while it is
// inactive (Unit.Ref), which would reset its timestamps.
func holdUnitLoaded(tb testing.TB, unit string) {
	conn, err := dbus.ConnectSystemBus()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	obj := conn.Object("org.freedesktop.systemd1", dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sd.PathBusEscape(unit)))
	if err := obj.Call("org.freedesktop.systemd1.Unit.Ref", 0).Err; err != nil {
		tb.Fatal(err)
	}
}

// bareConn is a plain go-systemd connection, subscribed so that systemd
// sends JobRemoved.
func bareConn(tb testing.TB) *sd.Conn {
	c, err := sd.NewSystemConnectionContext(context.Background())
	if err == nil {
		err = c.Subscribe()
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// bareJob queues a job and waits for its result, nothing more.
func bareJob(ctx context.Context, queue func(context.Context, string, string, chan<- string) (int, error), unit string) error {
	ch := make(chan string, 1)
	if _, err := queue(ctx, unit, "replace", ch); err != nil {
		return err
	}
	if r := <-ch; r != "done" {
		return fmt.Errorf("job %s", r)
	}
	return nil
}

// series are the durations of one operation.
type series struct {
	unitctl, bare, states, shell []time.Duration
}

type latencies struct{ start, stop series }

func (m latencies) report(b *testing.B) {
	var t strings.Builder
	row := "%-22s %12s %12s %12s %12s %12s\n"
	fmt.Fprintf(&t, "medians of %d runs\n", benchRuns)
	fmt.Fprintf(&t, row, "", "unitctl", "bare job", "overhead", "unit state", "systemctl")
	for _, r := range []struct {
		name string
		s    series
	}{{"StartUnit to active", m.start}, {"StopUnit to inactive", m.stop}} {
		ours, bare := median(r.s.unitctl), median(r.s.bare)
		fmt.Fprintf(&t, row, r.name, ms(ours), ms(bare), ms(ours-bare), ms(median(r.s.states)), ms(median(r.s.shell)))
		metric := strings.ToLower(strings.Fields(r.name)[0])
		b.ReportMetric(float64(ours)/1e6, metric+"-ms")
		b.ReportMetric(float64(ours-bare)/1e6, metric+"-overhead-ms")
	}
	b.Log("\n" + t.String())
}

// timed runs op and returns how long it took; an error fails tb.
func timed(tb testing.TB, op func() error) time.Duration {
	tb.Helper()
	start := time.Now()
	if err := op(); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// systemctlTimed is one systemctl run, as a shell would do it.
func systemctlTimed(args ...string) func() error {
	return func() error {
		if out, err := exec.Command("systemctl", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("systemctl %v: %v: %s", args, err, out)
		}
		return nil
	}
}

// jobTime is systemd's own time between two of the unit's monotonic
// timestamps, e.g. InactiveExit and ActiveEnter.
func (s *Systemd) jobTime(ctx context.Context, tb testing.TB, unit, from, to string) time.Duration {
	var us [2]uint64
	for i, name := range []string{from, to} {
		v, err := s.unitProperty(ctx, unit, name+"TimestampMonotonic")
		if err != nil {
			tb.Fatal(err)
		}
		us[i], _ = v.Value().(uint64)
	}
	return time.Duration(us[1]-us[0]) * time.Microsecond
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(d))
	return s[len(s)/2]
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/1e6)
}
