package control

// Review tests of inUnitCgroup, the guard's check that needs no call to
// systemd. Its promise (peer.go): true only for a cgroup systemd's system
// manager makes for the unit, "never true where InCgroup with the unit's
// ControlGroup would not be for a process systemd placed". Each case below
// names the cgroup systemd's system manager gives the unit (cg_escape,
// cg_slice_to_path) and asks whether the fast path admits a different one.

import (
	"strings"
	"testing"
)

type guardCase struct {
	name, text, unit string
	// want is what a check that admits only the unit's own cgroup (as the
	// system manager makes it) answers.
	want bool
	// own is the unit's ControlGroup as systemd would report it; "" when
	// irrelevant. When set and want is false, inCgroup(text, own) must be
	// false too (the fallback refuses): the case is a real false admit.
	own string
}

func runGuardCases(t *testing.T, cases []guardCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := inUnitCgroup(c.text, c.unit)
			if got != c.want {
				extra := ""
				if c.own != "" {
					extra = "; the fallback (inCgroup with systemd's ControlGroup " + c.own + ") says " + map[bool]string{true: "admit", false: "refuse"}[inCgroup(c.text, c.own)]
				}
				t.Errorf("inUnitCgroup(%q, %q) = %t, want %t%s", strings.TrimSpace(c.text), c.unit, got, c.want, extra)
			}
		})
	}
}

// Unit names systemd escapes because their prefix before a "." is a
// cgroup controller (cg_needs_escape: startswith(p, controller) and the
// next character is "."), or because they start with "cgroup.". systemd
// puts such a unit at /system.slice/_NAME, never at /system.slice/NAME;
// the fast path admits the unescaped one, which no system manager ever
// makes for that unit (nor for any other unit: escaping only prepends
// "_"). Only a root process can mkdir /system.slice/NAME and join it.
// The rule is systemd's newest; systemd 252 (the VM's) escapes only when
// the part before the last "." is a controller (cpu.service, not
// io.backup.service), so which cgroup a unit gets depends on the version.
func TestBreakGuardControllerPrefixedUnitNames(t *testing.T) {
	var cases []guardCase
	for _, u := range []string{
		"cpu.service", "cpuset.service", "cpuacct.service", "io.service", "blkio.service",
		"memory.service", "devices.service", "pids.service", "bpf-firewall.service",
		"io.backup.service", "cgroup.procs.service",
	} {
		cases = append(cases, guardCase{
			name: u, text: "0::/system.slice/" + u + "\n", unit: u, want: false,
			own: "/system.slice/_" + u,
		})
	}
	runGuardCases(t, cases)
}

// Slice chains systemd never makes. systemd puts slice a-b.slice at
// /a.slice/a-b.slice (cg_slice_to_path), the root slice -.slice at "/",
// so a component "-.slice", a top-level "system-foo.slice" or a chain
// "/a.slice/system.slice" is never the system manager's. The notable one
// is a container's: a container manager that is not systemd (LXC names
// its cgroups lxc.payload.NAME) whose container is named "web.slice",
// with a systemd inside in its own cgroup namespace, has that systemd
// make /lxc.payload.web.slice/system.slice/db.service: every component
// but the last ends in ".slice", and the fast path takes the container's
// db.service for the host's.
func TestBreakGuardSliceChainsSystemdNeverMakes(t *testing.T) {
	const own = "/system.slice/db.service"
	runGuardCases(t, []guardCase{
		{name: "nested systemd in an LXC container named web.slice",
			text: "0::/lxc.payload.web.slice/system.slice/db.service\n", unit: "db.service", want: false, own: own},
		{name: "nested systemd in a container cgroup named guests.slice/c1.slice",
			text: "0::/guests.slice/c1.slice/system.slice/db.service\n", unit: "db.service", want: false, own: own},
		{name: "root slice as a component",
			text: "0::/-.slice/db.service\n", unit: "db.service", want: false, own: own},
		{name: "dashed slice at the top",
			text: "0::/system-foo.slice/db.service\n", unit: "db.service", want: false, own: own},
		{name: "unrelated slices chained",
			text: "0::/a.slice/system.slice/db.service\n", unit: "db.service", want: false, own: own},
	})
}

// Hybrid hierarchy: systemd tracks a unit's processes in name=systemd
// (v1) and mirrors them in the unified tree. A process whose two lines
// disagree was moved in one of them by hand (root): it is in another
// unit's cgroup by the other. Both checks take any of the two lines, so
// this is as before the commit; recorded, not new.
func TestBreakGuardHybridLinesDisagree(t *testing.T) {
	text := "1:name=systemd:/system.slice/other.service\n0::/system.slice/db.service\n"
	if inCgroup(text, "/system.slice/db.service") != inUnitCgroup(text, "db.service") {
		t.Errorf("fast path and fallback differ on disagreeing hybrid lines: fallback %t, fast %t",
			inCgroup(text, "/system.slice/db.service"), inUnitCgroup(text, "db.service"))
	}
	if inUnitCgroup(text, "db.service") {
		t.Logf("note (pre-existing, also inCgroup): a process in other.service by name=systemd is admitted as db.service by its unified line")
	}
}

// What the fast path gets right: each is refused (left to systemd) or
// admitted as the system manager's own cgroup for the unit.
func TestBreakGuardBoundaries(t *testing.T) {
	runGuardCases(t, []guardCase{
		{name: "template instance in its slice", text: "0::/system.slice/system-vpn.slice/vpn@eu.service\n", unit: "vpn@eu.service", want: true},
		{name: "escaped instance", text: "0::/system.slice/system-vpn.slice/vpn@a\\x2db.service\n", unit: "vpn@a\\x2db.service", want: true},
		{name: "escaped slice component", text: "0::/_cpu.slice/cpu-x.slice/db.service\n", unit: "db.service", want: true},
		{name: "trailing slash", text: "0::/system.slice/db.service/\n", unit: "db.service", want: false},
		{name: "empty component", text: "0::/system.slice//db.service\n", unit: "db.service", want: false},
		{name: "leading empty component", text: "0:://system.slice/db.service\n", unit: "db.service", want: false},
		{name: "root", text: "0::/\n", unit: "db.service", want: false},
		{name: "no leading slash", text: "0::system.slice/db.service\n", unit: "db.service", want: false},
		{name: "outside the reader's cgroup namespace", text: "0::/../system.slice/db.service\n", unit: "db.service", want: false},
		{name: "dot component", text: "0::/system.slice/./db.service\n", unit: "db.service", want: false},
		{name: "dead cgroup", text: "0::/system.slice/db.service (deleted)\n", unit: "db.service", want: false},
		{name: "control subgroup of a delegated unit", text: "0::/system.slice/db.service/.control\n", unit: "db.service", want: false},
		{name: "delegated subtree posing as slices", text: "0::/system.slice/box.service/x.slice/db.service\n", unit: "db.service", want: false},
		{name: "user manager", text: "0::/user.slice/user-0.slice/user@0.service/app.slice/db.service\n", unit: "db.service", want: false},
		{name: "nspawn payload", text: "0::/machine.slice/systemd-nspawn@c.service/payload/system.slice/db.service\n", unit: "db.service", want: false},
		{name: "docker scope", text: "0::/system.slice/docker-0123.scope/system.slice/db.service\n", unit: "db.service", want: false},
		{name: "v1 controller line only", text: "3:cpu,cpuacct:/system.slice/db.service\n0::/user.slice/user-0.slice/session-1.scope\n", unit: "db.service", want: false},
		{name: "named v1 with another controller", text: "3:cpu,name=systemd:/system.slice/db.service\n", unit: "db.service", want: false},
		{name: "unit with a colon", text: "0::/system.slice/a:b.service\n", unit: "a:b.service", want: true},
		{name: "unit that is a slice name", text: "0::/system.slice\n", unit: "system.slice", want: false},
		{name: "unit \".service\"", text: "0::/system.slice/.service\n", unit: ".service", want: false},
		{name: "empty text", text: "", unit: "db.service", want: false},
	})
}

// TestBreakGuardShapes: the cases of TestInUnitCgroup and the systemd
// tree's usual shapes, against the check as fixed (slice chains as
// systemd nests them, no escaped unit names).
func TestBreakGuardShapes(t *testing.T) {
	all := []guardCase{
		// TestInUnitCgroup's cases (server_test.go)
		{text: "0::/system.slice/db.service\n", unit: "db.service", want: true},
		{text: "0::/app.slice/app-db.slice/db.service\n", unit: "db.service", want: true},
		{text: "12:memory:/x\n1:name=systemd:/system.slice/db.service\n0::/\n", unit: "db.service", want: true},
		{text: "0::/system.slice/db.service/control\n", unit: "db.service"},
		{text: "0::/system.slice/_io.service\n", unit: "_io.service"},
		{text: "0::/system.slice/__backup.service\n", unit: "_backup.service"},
		{text: "0::/system.slice/.hidden.service\n", unit: ".hidden.service"},
		{text: "0::/db.service\n", unit: "db.service"},
		{text: "0::/.slice/db.service\n", unit: "db.service"},
		{text: "0::/system.slice/db.service2\n", unit: "db.service"},
		{text: "0::/system.slice/xdb.service\n", unit: "db.service"},
		{text: "0::/user.slice/user-0.slice/user@0.service/app.slice/db.service\n", unit: "db.service"},
		{text: "0::/system.slice/docker.service/db.service\n", unit: "db.service"},
		{text: "0::/machine.slice/machine-c1.scope/payload/system.slice/db.service\n", unit: "db.service"},
		{text: "5:name=mine:/system.slice/db.service\n0::/user.slice/user-0.slice/session-3.scope\n", unit: "db.service"},
		{text: "4:memory:/system.slice/db.service\n0::/user.slice/user-0.slice/session-3.scope\n", unit: "db.service"},
		{text: "0::/system.slice/db.service\n", unit: ""},
		{text: "0::/system.slice/a/b.service\n", unit: "a/b.service"},
		// and the systemd tree's usual shapes
		{text: "0::/system.slice/system-vpn.slice/vpn@eu.service\n", unit: "vpn@eu.service", want: true},
		{text: "0::/_cpu.slice/cpu-x.slice/db.service\n", unit: "db.service", want: true},
		{text: "0::/a.slice/a-b.slice/a-b-c.slice/db.service\n", unit: "db.service", want: true},
		{text: "0::/user.slice/user-0.slice/session-1.scope\n", unit: "session-1.scope", want: true},
	}
	for _, c := range []string{"cpu.service", "io.backup.service", "cgroup.procs.service", "memory.service"} {
		all = append(all, guardCase{text: "0::/system.slice/" + c + "\n", unit: c})
	}
	for _, p := range []string{"/lxc.payload.web.slice/system.slice", "/guests.slice/c1.slice/system.slice", "/-.slice", "/system-foo.slice", "/a.slice/system.slice", "/system.slice//", "/system.slice/box.service/x.slice"} {
		all = append(all, guardCase{text: "0::" + p + "/db.service\n", unit: "db.service"})
	}
	for _, c := range all {
		if got := inUnitCgroup(c.text, c.unit); got != c.want {
			t.Errorf(" %s in %q: %t, want %t", c.unit, c.text, got, c.want)
		}
	}
}
