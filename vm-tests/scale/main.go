//go:build linux

// Command scale measures one unitlease daemon managing many leases against
// a real Redis: its memory, its CPU once every lease is held, and the Redis
// commands it sends, next to what the protocol needs (one renewal script
// per lease per retry period). It boots one container with N trivial
// annotated units, each its own lease. Once every unit is active it waits
// for the daemon's steady state (settleWait), then, with the metrics
// endpoint on, it measures twice: unscraped, then scraped every -scrape-every as a
// Prometheus would, and reports what the scrapes add; the last scrape
// goes through `promtool check metrics` when promtool is installed.
//
// -leases takes a list of sizes; each gets a node and a Redis of its own,
// and the run ends with a curve: for each size, how long systemd alone
// takes to start the same units as one transaction (measured in the same
// node before the daemon runs) next to how long the daemon takes from its
// start until every unit is active, the floor for that (systemd's own time
// plus one lease span and the confirm wait: a cold cluster has no record),
// how long until the daemon reported READY=1, its RSS and CPU, the Redis
// commands, and the stop_failed events of its start. Both starts are
// bound by the machine's CPU: each size also shows the machine's busy
// time per unit over systemd's start with a process before each unit,
// and over the daemon's start (all of it, and its starts from the first
// unit active on).
//
//	go run ./vm-tests/scale [-leases 1000[,2000,5000]] [-measure 1m] [-scrape-every 5s]
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/unitlease/unitlease/internal/daemon"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
	vmtests "github.com/unitlease/unitlease/vm-tests"
)

// timing keeps the default retry (5 s), so the renewal load is the
// default one, and shortens the rest so every lease is held in seconds.
const timing = `[timing]
retry = "5s"
renew_deadline = "2s"
stop_wait = "2s"
reply_max = "1s"
poll_min = "1s"
poll_max = "2s"
`

const unit = `[Service]
ExecStart=/bin/sleep infinity

[X-UnitLease]
`

func main() {
	leases := flag.String("leases", "1000", "annotated units, each its own lease; a comma-separated list measures each size and prints a curve")
	measure := flag.Duration("measure", time.Minute, "how long to measure once every lease is held (twice: unscraped, then scraped)")
	every := flag.Duration("scrape-every", 5*time.Second, "the scrape interval of the second measurement")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var sizes []int
	for _, f := range strings.Split(*leases, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "scale: -leases %q: %q is not a number of leases\n", *leases, f)
			os.Exit(2)
		}
		sizes = append(sizes, n)
	}
	if err := run(ctx, sizes, *measure, *every); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, sizes []int, measure, every time.Duration) error {
	if err := vmtests.CheckHost(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "unitlease-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin, err := vmtests.BuildUnitlease(ctx, ".", tmp, buildFlags()...)
	if err != nil {
		return err
	}
	service, err := os.ReadFile("packaging/unitlease.service")
	if err != nil {
		return err
	}
	var points []point
	for i, leases := range sizes {
		if i > 0 {
			fmt.Println()
		}
		p, err := measureSize(ctx, filepath.Join(tmp, fmt.Sprint("redis-", leases)), bin, service, leases, measure, every)
		if err != nil {
			// The sizes measured so far still make a curve.
			p.err = err
			fmt.Fprintf(os.Stderr, "scale: %d leases: %v\n", leases, err)
		}
		points = append(points, p)
		if ctx.Err() != nil {
			break
		}
	}
	if err := curve(points); err != nil {
		return err
	}
	for _, p := range points {
		if p.err != nil {
			return fmt.Errorf("%d leases: %w", p.leases, p.err)
		}
	}
	return nil
}

// point is one size's figures, for the curve.
type point struct {
	leases       int
	systemdStart time.Duration // systemd alone: one `systemctl start` of every unit
	systemdStop  time.Duration
	// systemd alone, each unit with an ExecStartPre=/bin/true: a process
	// before each start, as the guard of a managed unit is
	preStart, preStop time.Duration
	// the machine's CPU over that start, and over the daemon's start
	// until every unit is active (cpuTicks): until a first unit was seen
	// active (its discovery, the lease span), and from then on (the starts)
	preCPU, startCPU   cpuTicks
	prepCPU, startsCPU cpuTicks
	ready              time.Duration // `systemctl start unitlease.service`: until READY=1
	held               time.Duration // from the daemon's start until every unit is active
	rss, cpu           float64       // unscraped: median MB, % of a core
	peak               float64       // MB: the largest RSS since the daemon started (VmHWM), the start's included
	commands           float64       // Redis commands per second
	stopFailed         int           // stop_failed events since the daemon started
	err                error         // the size could not be measured
}

// measureSize boots a node with leases units and a Redis of its own and
// measures systemd alone, then the daemon.
func measureSize(ctx context.Context, redisDir string, bin vmtests.Programs, service []byte, leases int, measure, every time.Duration) (point, error) {
	p := point{leases: leases}
	if err := os.Mkdir(redisDir, 0o700); err != nil {
		return p, err
	}
	redis := redistest.Run(redisDir, redistest.Options{AppendOnly: true})
	defer redis.Stop()
	c, err := vmtests.NewCluster(ctx, vmtests.Options{Nodes: 1})
	if err != nil {
		return p, err
	}
	defer c.Close()
	n := c.Node(0)
	// The node shares the host's network: the endpoint is on its loopback.
	metricsAddr, err := freePort()
	if err != nil {
		return p, err
	}
	if err := install(ctx, n, bin, service, redis.Addr(), metricsAddr, leases); err != nil {
		return p, err
	}
	if p.systemdStart, p.systemdStop, _, err = systemdAlone(ctx, n, leases); err != nil {
		return p, err
	}
	if p.preStart, p.preStop, p.preCPU, err = systemdAloneWithPre(ctx, n, leases); err != nil {
		return p, err
	}
	before, err := markCPU(ctx, n)
	if err != nil {
		return p, err
	}
	start := time.Now()
	if _, stderr, err := n.Run(ctx, "systemctl", "start", "unitlease.service"); err != nil {
		return p, fmt.Errorf("start unitlease: %v: %s", err, stderr)
	}
	p.ready = time.Since(start)
	var first cpuTicks
	if err := waitAllActive(ctx, n, leases, max(5*time.Minute, time.Duration(leases)*200*time.Millisecond), &first); err != nil {
		// What the daemon said is what explains it.
		out, _, _ := n.Run(ctx, "sh", "-c", "journalctl --no-pager -o short-monotonic -u unitlease.service -p warning | tail -n 40; "+
			"journalctl --no-pager -o cat -u unitlease.service --output-fields=UNITLEASE_EVENT -o export | grep '^UNITLEASE_EVENT=' | sort | uniq -c")
		fmt.Fprintf(os.Stderr, "scale: %d leases: the daemon's last warnings and its journal events:\n%s\n", leases, out)
		return p, err
	}
	p.held = time.Since(start)
	after, err := markCPU(ctx, n)
	if err != nil {
		return p, err
	}
	p.startCPU = after.minus(before)
	if first.total != 0 {
		p.prepCPU, p.startsCPU = first.minus(before), after.minus(first)
	}
	// The steady state: once its STATUS= stays the same over a status
	// period (15 watchdog checks: 10 s with WatchdogSec=2s), the daemon
	// hands the start's free memory back and sets its GC target for its
	// leases. Measuring at once caught it before, or half way.
	time.Sleep(settleWait)
	return p, report(ctx, n, redis, &p, measure, "http://"+metricsAddr+"/metrics", every)
}

// settleWait is how long the benchmark waits, once every unit is active,
// before it measures: two status periods and a little.
const settleWait = 25 * time.Second

// unitNames is the shell words naming the scale units.
const unitNames = `$(for i in $(seq -w 1 "$N"); do echo scale-$i.service; done)`

// systemdAlone starts every scale unit with one `systemctl start` (one
// transaction, no drop-ins yet: the daemon has not run) and stops them
// with one `systemctl stop`, and times both: the floor of what any
// manager of these units can do on this machine. cost is the machine's
// CPU over the start.
func systemdAlone(ctx context.Context, n *vmtests.Node, leases int) (start, stop time.Duration, cost cpuTicks, err error) {
	before, err := markCPU(ctx, n)
	if err != nil {
		return 0, 0, cost, err
	}
	for _, op := range []string{"start", "stop"} {
		t := time.Now()
		if _, stderr, err := n.Run(ctx, "env", fmt.Sprint("N=", leases), "sh", "-c", "systemctl "+op+" "+unitNames); err != nil {
			return 0, 0, cost, fmt.Errorf("systemctl %s of the units: %v: %s", op, err, stderr)
		}
		if op == "start" {
			start = time.Since(t)
			after, err := markCPU(ctx, n)
			if err != nil {
				return 0, 0, cost, err
			}
			cost = after.minus(before)
			if err := waitAllActive(ctx, n, leases, time.Minute, nil); err != nil {
				return 0, 0, cost, err
			}
		} else {
			stop = time.Since(t)
		}
	}
	return start, stop, cost, nil
}

// preDropIn gives every scale unit an ExecStartPre=/bin/true (a drop-in
// for the name prefix), for systemdAloneWithPre.
const preDropIn = "/etc/systemd/system/scale-.service.d"

// systemdAloneWithPre is systemdAlone with a process before each start,
// as the guard (ExecStartPre=unitlease guard) of every managed unit runs:
// systemd forks twice for each start. The drop-in is removed again before
// the daemon runs.
func systemdAloneWithPre(ctx context.Context, n *vmtests.Node, leases int) (start, stop time.Duration, cost cpuTicks, err error) {
	set := "mkdir -p " + preDropIn + " && printf '[Service]\\nExecStartPre=/bin/true\\n' > " + preDropIn + "/pre.conf && systemctl daemon-reload"
	if _, stderr, err := n.Run(ctx, "sh", "-c", set); err != nil {
		return 0, 0, cost, fmt.Errorf("writing the ExecStartPre= drop-in: %v: %s", err, stderr)
	}
	start, stop, cost, err = systemdAlone(ctx, n, leases)
	if _, stderr, rerr := n.Run(ctx, "sh", "-c", "rm -rf "+preDropIn+" && systemctl daemon-reload"); rerr != nil && err == nil {
		err = fmt.Errorf("removing the ExecStartPre= drop-in: %v: %s", rerr, stderr)
	}
	return start, stop, cost, err
}

// cpuTicks is the machine's CPU time in clock ticks (USER_HZ, 100 a
// second): all its cores' busy and total time, and the node's systemd
// (PID 1), its own and its reaped processes'. markCPU reads the counters
// so far; minus gives what they did between two reads. A container's
// /proc/stat is the machine's.
type cpuTicks struct {
	busy, total, pid1, reaped int64
}

func (a cpuTicks) minus(b cpuTicks) cpuTicks {
	return cpuTicks{busy: a.busy - b.busy, total: a.total - b.total, pid1: a.pid1 - b.pid1, reaped: a.reaped - b.reaped}
}

// markCPU reads the node's machine-wide CPU counters and its PID 1's.
func markCPU(ctx context.Context, n *vmtests.Node) (cpuTicks, error) {
	out, _, err := n.Run(ctx, "sh", "-c", "head -n 1 /proc/stat; cut -d' ' -f14-17 /proc/1/stat")
	if err != nil {
		return cpuTicks{}, fmt.Errorf("reading the CPU counters: %v", err)
	}
	var m cpuTicks
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "cpu ") {
		return m, fmt.Errorf("reading the CPU counters: %q", out)
	}
	var f []int64
	for _, w := range strings.Fields(lines[0])[1:] {
		v, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return m, fmt.Errorf("reading /proc/stat: %q: %v", lines[0], err)
		}
		f = append(f, v)
	}
	if len(f) < 8 {
		return m, fmt.Errorf("reading /proc/stat: %q: fewer than 8 counters", lines[0])
	}
	// user nice system idle iowait irq softirq steal
	m.busy = f[0] + f[1] + f[2] + f[5] + f[6] + f[7]
	m.total = m.busy + f[3] + f[4]
	var ut, st, cut, cst int64
	if _, err := fmt.Sscanf(lines[1], "%d %d %d %d", &ut, &st, &cut, &cst); err != nil {
		return m, fmt.Errorf("reading /proc/1/stat: %q: %v", lines[1], err)
	}
	m.pid1, m.reaped = ut+st, cut+cst
	return m, nil
}

// perUnit is c's CPU time spread over units: the machine's busy time,
// systemd's and its reaped processes', in milliseconds per unit, and how
// busy the machine's cores were on average.
func (c cpuTicks) perUnit(units int) string {
	return fmt.Sprintf("%.1f CPU-ms per unit, the cores %.0f%% busy (systemd %.1f ms, the processes it reaped %.1f ms)",
		msPer(c.busy, units), c.busyShare(), msPer(c.pid1, units), msPer(c.reaped, units))
}

// msPerUnit is the machine's busy time over c, in milliseconds per unit.
func (c cpuTicks) msPerUnit(units int) float64 { return msPer(c.busy, units) }

// msPer is ticks (USER_HZ: 10 ms each) in milliseconds per unit.
func msPer(ticks int64, units int) float64 { return float64(ticks) * 10 / float64(units) }

// busyShare is how busy the machine's cores were over c, in percent.
func (c cpuTicks) busyShare() float64 {
	if c.total == 0 {
		return 0
	}
	return 100 * float64(c.busy) / float64(c.total)
}

// curve prints every size's figures side by side.
func curve(points []point) error {
	tm, err := benchTiming()
	if err != nil {
		return err
	}
	fmt.Printf("\nthe curve (retry %v, lease span %v, confirm wait %v)\n", tm.Retry, tm.LeaseSpan, tm.ConfirmWait())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "leases\tsystemd alone: start, stop\tfloor: + lease span + confirm\tunitlease: all active\tratio to floor\twith a process before each start: start\tits floor\tratio to it\tmachine CPU-ms per unit: all, the starts, systemd's\tREADY after\tRSS median\tpeak RSS\tCPU\tCPU per 1,000\tRedis commands\tstop_failed at start\t")
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }
	for _, p := range points {
		floor := p.systemdStart + tm.LeaseSpan + tm.ConfirmWait()
		preFloor := p.preStart + tm.LeaseSpan + tm.ConfirmWait()
		if p.err != nil {
			fmt.Fprintf(tw, "%d\t%v, %v\t%v\tnot measured: %v\t\t%v\t%v\t\t\t\t\t\t\t\t\t\t\n", p.leases,
				r(p.systemdStart), r(p.systemdStop), r(floor), p.err, r(p.preStart), r(preFloor))
			continue
		}
		starts := "-" // not measured
		if p.startsCPU.total != 0 {
			starts = fmt.Sprintf("%.1f", p.startsCPU.msPerUnit(p.leases))
		}
		fmt.Fprintf(tw, "%d\t%v, %v\t%v\t%v\t%.2f\t%v\t%v\t%.2f\t%.1f, %s, %.1f\t%v\t%.1f MB\t%.1f MB\t%.2f%%\t%.2f%%\t%.0f/s\t%d\t\n", p.leases,
			r(p.systemdStart), r(p.systemdStop), r(floor), r(p.held), p.held.Seconds()/floor.Seconds(),
			r(p.preStart), r(preFloor), p.held.Seconds()/preFloor.Seconds(),
			p.startCPU.msPerUnit(p.leases), starts, p.preCPU.msPerUnit(p.leases), r(p.ready),
			p.rss, p.peak, p.cpu, p.cpu*1000/float64(p.leases), p.commands, p.stopFailed)
	}
	return tw.Flush()
}

// benchTiming is the daemon's timing here: the config's, with the
// allowance of packaging/unitlease.service's watchdog.
func benchTiming() (policy.Timing, error) {
	t := policy.Timing{Retry: 5 * time.Second, RenewDeadline: 2 * time.Second, StopWait: 2 * time.Second,
		ReplyMax: time.Second, PollMin: time.Second, PollMax: 2 * time.Second, Allowance: daemon.KillAllowance(2*time.Second, time.Second)}
	return t.Resolved()
}

// freePort is a loopback address no one listens on now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// buildFlags adds -tags pprof when UNITLEASE_PPROF asks for profiles.
func buildFlags() []string {
	if os.Getenv("UNITLEASE_PPROF") != "" {
		return []string{"-tags", "pprof"}
	}
	return nil
}

func install(ctx context.Context, n *vmtests.Node, bin vmtests.Programs, service []byte, redisAddr, metricsAddr string, leases int) error {
	conf := fmt.Sprintf("node = %q\n[redis]\nurl = \"redis://%s/0\"\npool_size = 32\n[metrics]\nenabled = true\nlisten = %q\n%s", n.Name, redisAddr, metricsAddr, timing)
	if err := bin.Install(ctx, n); err != nil {
		return err
	}
	if err := n.WriteFile(ctx, "/etc/systemd/system/unitlease.service", service, 0o644); err != nil {
		return err
	}
	if err := n.WriteFile(ctx, "/etc/unitlease/unitlease.toml", []byte(conf), 0o640); err != nil {
		return err
	}
	// Units go in with one shell command: a thousand CopyIns would take a while.
	script := fmt.Sprintf(`for i in $(seq -w 1 %d); do printf '%%s' "$UNIT" > /etc/systemd/system/scale-$i.service; done; systemctl daemon-reload`, leases)
	// UNITLEASE_PPROF serves profiles; UNITLEASE_SCALE_ENV (e.g. "GOGC=100")
	// sets the daemon's environment, for experiments.
	var env []string
	if addr := os.Getenv("UNITLEASE_PPROF"); addr != "" {
		env = append(env, "UNITLEASE_PPROF="+addr)
	}
	env = append(env, strings.Fields(os.Getenv("UNITLEASE_SCALE_ENV"))...)
	if len(env) > 0 {
		script += "; mkdir -p /etc/systemd/system/unitlease.service.d; printf '[Service]\\nEnvironment=" + strings.Join(env, " ") + "\\n' > /etc/systemd/system/unitlease.service.d/env.conf; systemctl daemon-reload"
	}
	_, stderr, err := n.Run(ctx, "env", "UNIT="+unit, "sh", "-c", script)
	if err != nil {
		return fmt.Errorf("writing units: %v: %s", err, stderr)
	}
	return nil
}

// waitAllActive polls systemd until every scale unit runs. If first is
// not nil, it is set to the CPU counters at the first poll that finds
// some units active but not all (at a later one if reading them failed;
// left zero if no poll read them before every unit was active). The
// polls, a `systemctl list-units` once a second, count in the CPU of
// the daemon's start.
func waitAllActive(ctx context.Context, n *vmtests.Node, leases int, limit time.Duration, first *cpuTicks) error {
	deadline := time.Now().Add(limit)
	for {
		out, _, _ := n.Run(ctx, "sh", "-c", "systemctl list-units --state=active --no-legend 'scale-*.service' | wc -l")
		got, _ := strconv.Atoi(strings.TrimSpace(out))
		if got > 0 && got < leases && first != nil && first.total == 0 {
			if m, err := markCPU(ctx, n); err == nil {
				*first = m
			}
		}
		if got == leases {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d units active after %v", got, leases, limit)
		}
		time.Sleep(time.Second)
	}
}

type sample struct {
	cpu      time.Duration // the daemon's user + system time
	rss      int64         // kB
	anon     int64         // kB of it that is the process's own memory (RssAnon), not the binary's pages (RssFile)
	peak     int64         // kB: the largest RSS since the daemon started (VmHWM)
	commands map[string]int64
	at       time.Time
}

func take(ctx context.Context, n *vmtests.Node, redis *redistest.Server) (sample, error) {
	s := sample{at: time.Now(), commands: map[string]int64{}}
	out, _, err := n.Run(ctx, "sh", "-c", `pid=$(systemctl show -P MainPID unitlease.service); cut -d' ' -f14,15 /proc/$pid/stat; grep -E '^(VmHWM|VmRSS|RssAnon)' /proc/$pid/status`)
	if err != nil {
		return s, err
	}
	var utime, stime int64
	var peakLabel, rssLabel, anonLabel string
	if _, err := fmt.Sscanf(out, "%d %d\n%s %d kB\n%s %d kB\n%s %d", &utime, &stime, &peakLabel, &s.peak, &rssLabel, &s.rss, &anonLabel, &s.anon); err != nil {
		return s, fmt.Errorf("reading /proc: %v: %q", err, out)
	}
	s.cpu = time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	for _, line := range strings.Split(redis.Command("INFO", "commandstats"), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		calls, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
		s.commands[strings.TrimPrefix(name, "cmdstat_")] = calls
	}
	return s, nil
}

// window is one measurement: the daemon's CPU over it, its RSS sampled
// every 5 s (or at each scrape), the Redis commands sent.
type window struct {
	cpu      float64 // % of a core
	rss      []int64 // kB, sorted
	anon     []int64 // kB, sorted
	peak     int64   // kB: VmHWM at the window's end
	secs     float64
	commands map[string]int64 // per second
}

func (w window) rssMedian() float64  { return float64(w.rss[len(w.rss)/2]) / 1024 }
func (w window) rssMax() float64     { return float64(w.rss[len(w.rss)-1]) / 1024 }
func (w window) anonMedian() float64 { return float64(w.anon[len(w.anon)/2]) / 1024 }

// measureWindow measures for d, calling scrape (if not nil) every
// interval, and sampling RSS after each.
func measureWindow(ctx context.Context, n *vmtests.Node, redis *redistest.Server, d, interval time.Duration, scrape func() error) (window, error) {
	a, err := take(ctx, n, redis)
	if err != nil {
		return window{}, err
	}
	var w window
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(min(interval, time.Until(end)))
		if scrape != nil {
			if err := scrape(); err != nil {
				return w, err
			}
		}
		if s, err := take(ctx, n, redis); err == nil {
			w.rss, w.anon = append(w.rss, s.rss), append(w.anon, s.anon)
		}
	}
	b, err := take(ctx, n, redis)
	if err != nil {
		return w, err
	}
	w.rss, w.anon, w.peak = append(w.rss, b.rss), append(w.anon, b.anon), b.peak
	slices.Sort(w.rss)
	slices.Sort(w.anon)
	w.secs = b.at.Sub(a.at).Seconds()
	w.cpu = 100 * (b.cpu - a.cpu).Seconds() / w.secs
	w.commands = map[string]int64{}
	for name, calls := range b.commands {
		if d := calls - a.commands[name]; d != 0 {
			w.commands[name] = d
		}
	}
	return w, nil
}

// scraper fetches the endpoint as Prometheus does (gzip), keeping the last
// body.
type scraper struct {
	url    string
	last   []byte
	count  int
	series int
}

func (s *scraper) scrape() error {
	req, err := http.NewRequest(http.MethodGet, s.url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.9,*/*;q=0.1")
	resp, err := http.DefaultClient.Do(req) // asks for gzip and inflates it
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", s.url, resp.Status, body)
	}
	s.last, s.count = body, s.count+1
	s.series = 0
	for _, line := range strings.Split(string(body), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			s.series++
		}
	}
	return nil
}

// promtoolCheck runs `promtool check metrics` on a scrape, if promtool is
// installed.
func promtoolCheck(ctx context.Context, scrape []byte) string {
	if _, err := exec.LookPath("promtool"); err != nil {
		return "not run (no promtool)"
	}
	cmd := exec.CommandContext(ctx, "promtool", "check", "metrics")
	cmd.Stdin = strings.NewReader(string(scrape))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("FAILED: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return "no problems"
}

func report(ctx context.Context, n *vmtests.Node, redis *redistest.Server, p *point, measure time.Duration, metricsURL string, every time.Duration) error {
	leases, held := p.leases, p.held
	cursor, _, _ := n.Run(ctx, "sh", "-c", "journalctl -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'")
	// The profiles (UNITLEASE_PPROF) cover the unscraped measurement, or
	// the scraped one with UNITLEASE_PPROF_SCRAPED set.
	profileScraped := os.Getenv("UNITLEASE_PPROF_SCRAPED") != ""
	profiled := profile(measure, !profileScraped)
	// RSS moves with the garbage collector's cycle: sample it every 5 s.
	quiet, err := measureWindow(ctx, n, redis, measure, 5*time.Second, nil)
	if err != nil {
		return err
	}
	if err := <-profiled; err != nil {
		return err
	}
	profiled = profile(measure, profileScraped)
	sc := &scraper{url: metricsURL}
	scraped, err := measureWindow(ctx, n, redis, measure, every, sc.scrape)
	if err != nil {
		return err
	}
	if err := <-profiled; err != nil {
		return err
	}
	check := promtoolCheck(ctx, sc.last)
	events, notes, _ := countEvents(ctx, n, strings.TrimSpace(cursor))
	all, startup, counts := countEvents(ctx, n, "")
	timeline := startTimeline(ctx, n)
	p.rss, p.peak, p.cpu, p.stopFailed = quiet.rssMedian(), float64(quiet.peak)/1024, quiet.cpu, counts["stop_failed"]
	var total int64
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(quiet.commands)) {
		d := quiet.commands[name]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.1f/s", name, float64(d)/quiet.secs))
	}
	p.commands = float64(total) / quiet.secs
	need := float64(leases) / 5
	fmt.Printf("one daemon, %d leases, retry 5s, against redis-server on loopback (appendfsync always)\n", leases)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "systemd alone, one transaction\tstarts the %d units in %v, stops them in %v\n", leases, p.systemdStart.Round(100*time.Millisecond), p.systemdStop.Round(100*time.Millisecond))
	fmt.Fprintf(tw, "the same, with ExecStartPre=/bin/true each\tstarts them in %v, stops them in %v (a process before each start, as the guard)\n", p.preStart.Round(100*time.Millisecond), p.preStop.Round(100*time.Millisecond))
	fmt.Fprintf(tw, "the machine's CPU over systemd's start with a process before each\t%s\n", p.preCPU.perUnit(leases))
	fmt.Fprintf(tw, "the machine's CPU from the daemon's start until all active\t%s; %.2f times systemd's own\n", p.startCPU.perUnit(leases), ratio(p.startCPU.busy, p.preCPU.busy))
	if p.startsCPU.total != 0 {
		fmt.Fprintf(tw, "  until a first unit was active\t%s\n", p.prepCPU.perUnit(leases))
		fmt.Fprintf(tw, "  from then until all active (the starts)\t%s; %.2f times systemd's own\n", p.startsCPU.perUnit(leases), ratio(p.startsCPU.busy, p.preCPU.busy))
	} else {
		fmt.Fprintf(tw, "  split at a first unit active\tnot measured: no poll read the counters while some units were active and others not\n")
	}
	fmt.Fprintf(tw, "READY=1 after\t%v\n", p.ready.Round(100*time.Millisecond))
	first, _, _ := n.Run(ctx, "journalctl", "--no-pager", "-o", "cat", "-u", "unitlease.service", "-g", "^first discovery done")
	fmt.Fprintf(tw, "the daemon's first discovery\t%s\n", strings.TrimPrefix(strings.TrimSpace(first), "first discovery done "))
	fmt.Fprintf(tw, "all %d units active after\t%v\n", leases, held.Round(time.Second))
	fmt.Fprintf(tw, "the start, from daemon_start\t%s\n", timeline)
	fmt.Fprintf(tw, "daemon RSS, every 5 s while measuring (from %v after)\tmedian %.1f MB, max %.1f MB (%d samples); median %.1f MB of it its own (RssAnon), the rest the binary's pages\n", settleWait, quiet.rssMedian(), quiet.rssMax(), len(quiet.rss), quiet.anonMedian())
	fmt.Fprintf(tw, "daemon peak RSS since it started (VmHWM)\t%.1f MB, its first discovery and starts included\n", p.peak)
	fmt.Fprintf(tw, "daemon CPU, every lease held (over %v)\t%.2f%% of a core\n", measure, quiet.cpu)
	fmt.Fprintf(tw, "Redis commands\t%.1f/s (%s)\n", float64(total)/quiet.secs, strings.Join(parts, ", "))
	fmt.Fprintf(tw, "protocol's need: one renewal script per lease per retry\t%.1f/s\n", need)
	fmt.Fprintf(tw, "scraped every %v (over %v, %d scrapes of %d series, %.0f kB)\tRSS median %.1f MB, max %.1f MB; CPU %.2f%% of a core\n",
		every, measure, sc.count, sc.series, float64(len(sc.last))/1024, scraped.rssMedian(), scraped.rssMax(), scraped.cpu)
	fmt.Fprintf(tw, "what the scrapes add\tRSS median %+.1f MB, max %+.1f MB; CPU %+.2f%% of a core\n",
		scraped.rssMedian()-quiet.rssMedian(), scraped.rssMax()-quiet.rssMax(), scraped.cpu-quiet.cpu)
	fmt.Fprintf(tw, "promtool check metrics on the last scrape\t%s\n", check)
	fmt.Fprintf(tw, "journal events while measuring\t%s\n", events)
	fmt.Fprintf(tw, "journal events since the daemon started\t%s\n", all)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, m := range notes {
		fmt.Println("  while measuring:", m)
	}
	for _, m := range startup {
		fmt.Println("  since start:", m)
	}
	if strings.HasPrefix(check, "FAILED") {
		return fmt.Errorf("promtool check metrics: %s", check)
	}
	return nil
}

// profile fetches a CPU profile over the measurement, then a heap
// profile, into UNITLEASE_PPROF_DIR (default /tmp), when UNITLEASE_PPROF
// names the daemon's profiling address.
func profile(measure time.Duration, now bool) <-chan error {
	done := make(chan error, 1)
	addr := os.Getenv("UNITLEASE_PPROF")
	if addr == "" || !now {
		done <- nil
		return done
	}
	dir := cmp.Or(os.Getenv("UNITLEASE_PPROF_DIR"), os.TempDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		done <- err
		return done
	}
	go func() {
		secs := int((measure - time.Second).Seconds())
		// A heap profile now, as the base of the one at the end: what the
		// steady state allocates is the difference.
		err := fetch("http://"+addr+"/debug/pprof/heap", filepath.Join(dir, "unitlease-heap-base.pprof"))
		if err == nil {
			err = fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), filepath.Join(dir, "unitlease-cpu.pprof"))
		}
		if err == nil {
			err = fetch("http://"+addr+"/debug/pprof/heap", filepath.Join(dir, "unitlease-heap.pprof"))
		}
		if err == nil {
			err = fetch("http://"+addr+"/debug/pprof/heap?debug=1", filepath.Join(dir, "unitlease-heap.txt"))
		}
		done <- err
	}()
	return done
}

func fetch(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	fmt.Fprintln(os.Stderr, "scale: wrote", path)
	return f.Close()
}

// startTimeline says when, after the daemon's daemon_start entry, its
// first and last acquired, started and stopped entries came, and the
// first discovery's end.
func startTimeline(ctx context.Context, n *vmtests.Node) string {
	out, _, _ := n.Run(ctx, "journalctl", "--no-pager", "-u", "unitlease.service", "-o", "json", "--output-fields=UNITLEASE_EVENT,MESSAGE,__REALTIME_TIMESTAMP")
	first, last := map[string]int64{}, map[string]int64{}
	var begun int64
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Event   string `json:"UNITLEASE_EVENT"`
			Message string `json:"MESSAGE"`
			At      string `json:"__REALTIME_TIMESTAMP"`
		}
		if json.Unmarshal([]byte(line), &e) != nil {
			continue
		}
		at, _ := strconv.ParseInt(e.At, 10, 64)
		ev := e.Event
		if strings.HasPrefix(e.Message, "first discovery done") {
			ev = "discovered"
		}
		if ev == "daemon_start" {
			begun = at
		}
		if _, ok := first[ev]; !ok {
			first[ev] = at
		}
		last[ev] = at
	}
	var parts []string
	for _, ev := range []string{"discovered", "stopped", "acquired", "started"} {
		if f, ok := first[ev]; ok && begun != 0 {
			since := func(us int64) time.Duration {
				return (time.Duration(us-begun) * time.Microsecond).Round(100 * time.Millisecond)
			}
			if f == last[ev] {
				parts = append(parts, fmt.Sprintf("%s +%v", ev, since(f)))
			} else {
				parts = append(parts, fmt.Sprintf("%s +%v to +%v", ev, since(f), since(last[ev])))
			}
		}
	}
	return strings.Join(parts, "; ")
}

// countEvents counts the daemon's UNITLEASE_EVENT values after cursor (or
// all of them): a steady state has none. It also returns the first two
// messages of each kind of failure, which a steady state should not have.
func countEvents(ctx context.Context, n *vmtests.Node, cursor string) (string, []string, map[string]int) {
	args := []string{"journalctl", "--no-pager", "-u", "unitlease.service", "-o", "json", "--output-fields=UNITLEASE_EVENT,MESSAGE"}
	if cursor != "" {
		args = append(args, "--after-cursor", cursor)
	}
	out, _, _ := n.Run(ctx, args...)
	counts := map[string]int{}
	var notes []string
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Event   string `json:"UNITLEASE_EVENT"`
			Message string `json:"MESSAGE"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Event != "" {
			counts[e.Event]++
			if strings.HasSuffix(e.Event, "_failed") && counts[e.Event] <= 2 {
				notes = append(notes, e.Event+": "+e.Message)
			}
		}
	}
	if len(counts) == 0 {
		return "none", notes, counts
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return strings.Join(parts, ", "), notes, counts
}

// ratio is a/b, 0 for a b of 0.
func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
