// Command witness is the exclusion witness the end-to-end tests run as a
// managed unit on every node. At start it takes a non-blocking exclusive
// flock on a file bind-mounted into every node; if another copy holds it,
// it records a violation. It logs its start and stop with the node's name
// and CLOCK_MONOTONIC, which every container shares with the host.
//
//	witness -dir /shared -name demo [-on-term exit|ignore|delay=DURATION]
//
// Log lines in DIR/NAME.log: "start NODE NS TOKEN" (TOKEN is
// UNITLEASE_TOKEN from its environment, "-" without one), "stop NODE NS",
// "violation NODE NS", and "fail NODE NS" when SIGUSR1 makes it exit with
// status 1 (a unit that fails on its own, whatever -on-term says). Writes
// are single O_APPEND writes, atomic across nodes.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	dir := flag.String("dir", "/shared", "directory shared by every node")
	name := flag.String("name", "witness", "name of the lock and log files")
	onTerm := flag.String("on-term", "exit", "on SIGTERM: exit, ignore, or delay=DURATION then exit")
	failAfter := flag.Duration("fail-after", 0, "if set, fail (exit 1) this long after starting: a unit that always fails")
	flag.Parse()
	if *failAfter > 0 {
		time.AfterFunc(*failAfter, func() { _ = syscall.Kill(os.Getpid(), syscall.SIGUSR1) })
	}
	host, _ := os.Hostname()
	w := &witness{log: filepath.Join(*dir, *name+".log"), node: host}
	lock, err := os.OpenFile(filepath.Join(*dir, *name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		fail(err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		w.record("violation")
	}
	token := os.Getenv("UNITLEASE_TOKEN")
	if token == "" || strings.ContainsAny(token, " \n") {
		token = "-"
	}
	w.record("start", token)
	if w.wait(*onTerm) {
		w.record("fail")
		os.Exit(1)
	}
	w.record("stop")
}

type witness struct{ log, node string }

func (w *witness) record(what string, extra ...string) {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	line := strings.Join(append([]string{what, w.node, fmt.Sprint(ts.Nano())}, extra...), " ") + "\n"
	f, err := os.OpenFile(w.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fail(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		fail(err)
	}
}

// wait returns when the witness should exit: true when SIGUSR1 asks it
// to fail.
func (w *witness) wait(onTerm string) (failed bool) {
	term := make(chan os.Signal, 1)
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	switch {
	case onTerm == "ignore":
		signal.Ignore(syscall.SIGTERM)
		<-usr1 // otherwise only SIGKILL ends it
		return true
	case strings.HasPrefix(onTerm, "delay="):
		d, err := time.ParseDuration(strings.TrimPrefix(onTerm, "delay="))
		if err != nil {
			fail(err)
		}
		select {
		case <-term:
		case <-usr1:
			return true
		}
		time.Sleep(d)
	default:
		select {
		case <-term:
		case <-usr1:
			return true
		}
	}
	return false
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "witness:", err)
	os.Exit(1)
}
