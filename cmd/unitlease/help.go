package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// A command of unitlease, with what `unitlease help COMMAND` and
// `unitlease COMMAND --help` print.
type command struct {
	name     string
	args     string // after the name, in the synopsis
	summary  string // one line, in the list of commands
	help     string // paragraphs, after the synopsis
	run      func(args []string, stdout, stderr io.Writer) int
	hasFlags bool
}

var commands = []command{
	{name: "run", args: "[--config FILE]", summary: "the daemon (what unitlease.service runs)", hasFlags: true, help: `
Run the daemon: read the configuration (default /etc/unitlease/unitlease.toml),
find the units annotated with an [X-UnitLease] section, and keep each lease's
units running on exactly one node. Started by unitlease.service; not meant to
be run by hand. A bad configuration keeps it from starting, with the reason in
the journal (journalctl -u unitlease).`},
	{name: "status", args: "[--json] [-w]", summary: "this node's units and the cluster's view", hasFlags: true, help: `
Show each lease this node manages (role, holder, version, time left to the
leader's deadline), the units refused or badly annotated with the reason, and
every lease in Redis with its holder and how many nodes watch it. --json
prints the same as JSON; -w prints again every second.`},
	{name: "handoff", args: "LEASE|UNIT [--to NODE]", summary: "stop here, release, and wait for a peer to take over", hasFlags: true, help: `
Planned switchover: stop the lease's units on this node, wait until systemd
reports them inactive, release the lease, and wait for a peer to take it.
Refused when no other node announces itself ready to take the lease. A name
is a lease's name first; a unit's name selects its lease only when no lease
has that name.

--to NODE offers the released lease to NODE alone: it takes it at once, and
any other node only after a lease span (so a NODE that dies meanwhile does
not leave the lease down for good). Refused, with the reason, unless NODE
announces itself ready for the lease: its daemon runs and watches the lease,
it is not drained, and it can run the unit.`},
	{name: "drain", args: "[--stop]", summary: "hand off every lease held here and take none until undrain", hasFlags: true, help: `
Mark this node drained (kept in /var/lib/unitlease across daemon restarts and
reboots, and announced to every node), then hand each lease it holds to a
peer ready for it, all at once, as handoff does. A lease no peer is ready for
keeps running here and is named; --stop stops and releases it all the same.
A drained node acquires no lease. Exits 0 once this node holds none, 1 if a
lease is still held here (left running, or its stop failed).`},
	{name: "undrain", summary: "let this node take leases again", help: `
End the drain: the node competes for its leases again, as a standby.`},
	{name: "check", args: "[--config FILE]", summary: "validate configuration, annotations, units and Redis", hasFlags: true, help: `
Validate the configuration and print the timing it gives (lease span, confirm
wait, backoff, the worst-case failover), reach Redis and report its
durability, read unitlease.service's watchdog, and validate every annotated
unit and its drop-in. Exits 1 if anything is an error.`},
	{name: "guard", args: "UNIT", summary: "ExecStartPre= of managed units: fail unless this node may start UNIT", help: `
The first ExecStartPre= of every managed unit (the drop-in adds it): exits 0
only if this node's daemon holds the unit's lease and is starting it. A
start by hand on a standby fails here. Only the unit's own processes may ask.`},
	{name: "reset", args: "[--config FILE] LEASE", summary: "replace a lease key holding garbage with a released record", hasFlags: true, help: `
Replace the value of a lease key that is not a record (garbage, a key of
another type, a value too long to read) with a released record, printing what
it replaced. A valid record is never touched: use handoff to move a lease.
Standbys take the released record once they have seen it unchanged for a
lease span.`},
	{name: "clear", args: "[--config FILE] [--stop-failed] LEASE", summary: "forget a lease's failures; with --stop-failed, release it from a holder that could not stop its units", hasFlags: true, help: `
Tell every daemon that watches the lease to forget its units' failures: a
node that failed them FailureThreshold= times competes for the lease again.
A lease whose holder could not stop its units (stop_failed) stays blocked,
and clear says so (exit 1). --stop-failed is the operator's word that those
units are gone from that node: it also releases the lease in the holder's
name, so that a standby takes it at once; it refuses a lease in any other
state.`},
	{name: "disable", args: "[--config FILE] LEASE", summary: "stop a lease's units wherever they run and keep them stopped everywhere", hasFlags: true, help: `
Disable the lease cluster-wide: a marker in Redis that every node and every
restart sees. The node that runs the lease's units stops them, confirms them
inactive and releases the lease; no node acquires it while it is disabled.
Waits until the lease is released and says so; a stop that fails keeps the
lease held (stop_failed) as any failed stop does.`},
	{name: "enable", args: "[--config FILE] LEASE", summary: "let the nodes take a disabled lease again", hasFlags: true, help: `
Remove the lease's disabled marker: the nodes that watch the lease compete for
it again, and one takes the released record at once.`},
	{name: "version", summary: "print the version", help: `
Print unitlease's version.`},
	{name: "help", args: "[COMMAND]", summary: "this list, or a command's help", help: `
Print the list of commands, or what a command does and takes.`},
}

func lookup(name string) (command, bool) {
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return command{}, false
	}
	return commands[i], true
}

// usage is the list of commands.
var usage = func() string {
	var b strings.Builder
	b.WriteString("usage: unitlease COMMAND [ARGS]\n\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-32s%s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	b.WriteString("\nunitlease help COMMAND, or unitlease COMMAND --help, says more; see also unitlease(8).\n")
	return b.String()
}()

// synopsis is a command's usage line.
func (c command) synopsis() string {
	return strings.TrimSpace("usage: unitlease " + c.name + " " + c.args)
}

// printHelp prints a command's help to w.
func (c command) printHelp(w io.Writer) {
	fmt.Fprintf(w, "%s\n%s\n", c.synopsis(), c.help)
}

// wantsHelp reports whether args ask for help: -h, -help or --help
// anywhere before a "--".
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

func cmdHelp(args []string, stdout, stderr io.Writer) int {
	switch len(args) {
	case 0:
		fmt.Fprint(stdout, usage)
		return 0
	case 1:
		if c, ok := lookup(args[0]); ok {
			c.printHelp(stdout)
			return 0
		}
		fmt.Fprintf(stderr, "unitlease help: unknown command %q\n%s", args[0], usage)
		return 2
	}
	fmt.Fprintln(stderr, "usage: unitlease help [COMMAND]")
	return 2
}
