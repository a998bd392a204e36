// Command unitlease keeps one copy of a systemd unit running across a group
// of machines. See unitlease(8).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/control"
	"github.com/unitlease/unitlease/internal/daemon"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// socketPath is the daemon's control socket that status, guard and handoff
// dial; tests point it elsewhere.
var socketPath = control.SocketPath

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		return cmdHelp(nil, stdout, stderr)
	}
	// go-redis's own messages ("failed to dial after 5 attempts") would
	// reach the terminal beside what the command reports of the same
	// failure; run sends them to its journal instead.
	redislease.LogTo(slog.New(slog.DiscardHandler))
	c, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "unitlease: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if wantsHelp(args[1:]) {
		c.printHelp(stdout)
		return 0
	}
	return c.run(args[1:], stdout, stderr)
}

func init() {
	// Set here: the table is read by cmdHelp, which it lists.
	for i, f := range map[string]func([]string, io.Writer, io.Writer) int{
		"run": cmdRun, "status": cmdStatus, "handoff": cmdHandoff, "drain": cmdDrain, "undrain": cmdUndrain, "check": cmdCheck,
		"guard": cmdGuard, "reset": cmdReset, "clear": cmdClear, "disable": cmdDisable, "enable": cmdEnable, "version": cmdVersion, "help": cmdHelp,
	} {
		c := slices.IndexFunc(commands, func(c command) bool { return c.name == i })
		commands[c].run = f
	}
}

// flags parses a command's flags; a parse error prints to stderr.
func flags(name string, args []string, stderr io.Writer, define func(*flag.FlagSet)) (*flag.FlagSet, bool) {
	fs := flag.NewFlagSet("unitlease "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		c, _ := lookup(name)
		fmt.Fprintln(stderr, c.synopsis())
		fs.PrintDefaults()
	}
	define(fs)
	return fs, fs.Parse(args) == nil
}

func cmdVersion(_ []string, stdout, _ io.Writer) int {
	fmt.Fprintln(stdout, "unitlease", daemon.Version)
	return 0
}

// newLog makes run's logger: the journal when its socket exists, else
// stderr. Tests read what it would write through logging.Text.
var newLog = logging.New

func cmdRun(args []string, _, stderr io.Writer) int {
	var path string
	fs, ok := flags("run", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&path, "config", config.DefaultPath, "configuration file")
	})
	if !ok || fs.NArg() > 0 {
		return 2
	}
	log := newLog(slog.LevelInfo)
	cfg, err := config.Load(path)
	if err != nil {
		// A process that exits at once may be gone before journald reads
		// its cgroup: OBJECT_SYSTEMD_UNIT keeps `journalctl -u unitlease`
		// showing why it did not start.
		log.Error("not starting: "+err.Error(), logging.Event, "config_error", "OBJECT_SYSTEMD_UNIT", "unitlease.service")
		return 1
	}
	// The daemon's live heap is small and steady: half the default GC
	// target keeps its memory near it. At 1,000 leases the scale
	// benchmark measured (RSS median, CPU): GOGC=25 22.3 MB, 1.72%;
	// 50 23.4 MB, 1.16%; 100 28.2 MB, 0.96%. Past 2,000 leases the
	// daemon lowers it in its steady state (daemon.GCPercent). GOGC in
	// the environment overrides both.
	tuneGC := os.Getenv("GOGC") == ""
	if tuneGC {
		debug.SetGCPercent(50)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// No step of a lease waits on the journal: entries queue, and are
	// dropped and counted if journald stops reading.
	journal := logging.NewAsync(log.Handler(), logging.QueueMax)
	defer journal.Close(2 * time.Second)
	log = slog.New(journal)
	if err := daemon.Run(ctx, cfg, log, daemon.RunOptions{TuneGC: tuneGC}); err != nil {
		if errors.Is(err, daemon.ErrSetup) {
			log.Error(strings.TrimPrefix(err.Error(), daemon.ErrSetup.Error()+": "), logging.Event, "config_error", "OBJECT_SYSTEMD_UNIT", "unitlease.service")
			return 1
		}
		log.Error("exiting: "+err.Error(), logging.Event, "daemon_error", "OBJECT_SYSTEMD_UNIT", "unitlease.service")
		return 1
	}
	return 0
}

func cmdGuard(args []string, _, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, mustLookup("guard").synopsis())
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := control.Dial(socketPath).Guard(ctx, args[0]); err != nil {
		fmt.Fprintln(stderr, "unitlease guard: refusing to start", args[0]+":", err)
		return 1
	}
	return 0
}

func cmdHandoff(args []string, stdout, stderr io.Writer) int {
	var to string
	target, ok := oneArgFlags("handoff", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&to, "to", "", "offer the lease to this `NODE` alone (for a lease span)")
	})
	if !ok {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := control.Dial(socketPath).Handoff(ctx, target, to)
	if err != nil {
		fmt.Fprintln(stderr, "unitlease handoff:", err)
		return 1
	}
	fmt.Fprintf(stdout, "lease %s is now held by %s (version %d)\n", res.Lease, res.Holder, res.Version)
	return 0
}

// oneArgFlags parses a command that takes one argument, with its flags
// before or after it (handoff LEASE --to NODE).
func oneArgFlags(name string, args []string, stderr io.Writer, define func(*flag.FlagSet)) (string, bool) {
	fs, ok := flags(name, args, stderr, define)
	if !ok {
		return "", false
	}
	var pos []string
	for fs.NArg() > 0 {
		pos = append(pos, fs.Arg(0))
		if fs.Parse(fs.Args()[1:]) != nil {
			return "", false
		}
	}
	if len(pos) != 1 {
		fmt.Fprintln(stderr, mustLookup(name).synopsis())
		return "", false
	}
	return pos[0], true
}

func cmdDrain(args []string, stdout, stderr io.Writer) int {
	var stopAll bool
	fs, ok := flags("drain", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&stopAll, "stop", false, "also stop the leases no peer is ready for")
	})
	if !ok || fs.NArg() > 0 {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := control.Dial(socketPath).Drain(ctx, stopAll)
	if err != nil {
		fmt.Fprintln(stderr, "unitlease drain:", err)
		return 1
	}
	return printDrain(stdout, res)
}

// printDrain says what became of each lease; it returns 1 when the node
// still holds one (left running, or a stop or handoff that failed), so a
// script patches the node only on 0.
func printDrain(w io.Writer, res control.DrainResult) int {
	fmt.Fprintf(w, "node %s is drained: it takes no lease until `unitlease undrain`\n", shown(res.Node))
	code := 0
	for _, o := range res.Leases {
		switch o.Outcome {
		case control.DrainHandedOff:
			fmt.Fprintf(w, "  %s: handed off to %s\n", shown(o.Lease), shown(o.Holder))
		case control.DrainStopped:
			fmt.Fprintf(w, "  %s: %s\n", shown(o.Lease), shown(o.Msg))
		default:
			code = 1
			fmt.Fprintf(w, "  %s: %s: %s\n", shown(o.Lease), strings.ReplaceAll(o.Outcome, "_", " "), shown(o.Msg))
		}
	}
	if len(res.Leases) == 0 {
		fmt.Fprintln(w, "  (it held no lease)")
	}
	return code
}

func cmdUndrain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, mustLookup("undrain").synopsis())
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := control.Dial(socketPath).Undrain(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "unitlease undrain:", err)
		return 1
	}
	fmt.Fprintf(stdout, "node %s takes leases again\n", shown(res.Node))
	return 0
}

func cmdReset(args []string, stdout, stderr io.Writer) int {
	var path string
	fs, ok := flags("reset", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&path, "config", config.DefaultPath, "configuration file")
	})
	if !ok || fs.NArg() != 1 {
		fmt.Fprintln(stderr, mustLookup("reset").synopsis())
		return 2
	}
	if err := unitctl.ValidLeaseName(fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, "unitlease reset: lease", err)
		return 2
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, "unitlease reset:", err)
		return 1
	}
	if err := resetGarbage(cfg, fs.Arg(0), stdout); err != nil {
		fmt.Fprintln(stderr, "unitlease reset:", err)
		return 1
	}
	return 0
}

func cmdClear(args []string, stdout, stderr io.Writer) int {
	var path string
	var stopFailed bool
	fs, ok := flags("clear", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&path, "config", config.DefaultPath, "configuration file")
		fs.BoolVar(&stopFailed, "stop-failed", false, "also release a stop_failed record: the units are gone from the node it names")
	})
	if !ok || fs.NArg() != 1 {
		fmt.Fprintln(stderr, mustLookup("clear").synopsis())
		return 2
	}
	if err := unitctl.ValidLeaseName(fs.Arg(0)); err != nil {
		fmt.Fprintln(stderr, "unitlease clear: lease", err)
		return 2
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(stderr, "unitlease clear:", err)
		return 1
	}
	if err := clearLease(cfg, fs.Arg(0), stopFailed, stdout); err != nil {
		fmt.Fprintln(stderr, "unitlease clear:", err)
		return 1
	}
	return 0
}

func cmdDisable(args []string, stdout, stderr io.Writer) int {
	return toggle("disable", args, stdout, stderr)
}
func cmdEnable(args []string, stdout, stderr io.Writer) int {
	return toggle("enable", args, stdout, stderr)
}

// toggle is disable and enable: their flags, the lease, the store.
func toggle(name string, args []string, stdout, stderr io.Writer) int {
	var path string
	fs, ok := flags(name, args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&path, "config", config.DefaultPath, "configuration file")
	})
	if !ok || fs.NArg() != 1 {
		fmt.Fprintln(stderr, mustLookup(name).synopsis())
		return 2
	}
	lease := fs.Arg(0)
	if err := unitctl.ValidLeaseName(lease); err != nil {
		fmt.Fprintf(stderr, "unitlease %s: lease %v\n", name, err)
		return 2
	}
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintf(stderr, "unitlease %s: %v\n", name, err)
		return 1
	}
	do := disableLease
	if name == "enable" {
		do = enableLease
	}
	if err := do(cfg, lease, stdout); err != nil {
		fmt.Fprintf(stderr, "unitlease %s: %v\n", name, err)
		return 1
	}
	return 0
}

var errNotGarbage = errors.New("holds a valid record; reset only replaces a value that is not one (use `unitlease handoff` to move a lease)")

func mustLookup(name string) command {
	c, ok := lookup(name)
	if !ok {
		panic("unitlease: no command " + name)
	}
	return c
}
