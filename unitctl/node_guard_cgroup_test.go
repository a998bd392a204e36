package unitctl

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/control"
)

// TestNodeGuardRunsWhereSystemdPutsTheUnit: the guard (an ExecStartPre=
// with "+") runs in the cgroup systemd makes for the unit, which the
// daemon recognises without asking systemd (control.InUnitCgroup), in a
// slice of the default tree and in a unit's own Slice=.
func TestNodeGuardRunsWhereSystemdPutsTheUnit(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	units := map[string]string{
		"ul-guard-cg.service":       "",
		"ul-guard-cg-slice.service": "Slice=ul-test-guard.slice\n",
	}
	files := map[string]string{}
	for u, extra := range units {
		files[u] = "[Service]\n" + extra + "ExecStartPre=+/bin/sh -c 'cat /proc/self/cgroup > /run/" + u + ".pre'\nExecStart=/bin/sleep 86416\n"
	}
	installUnits(t, files)
	for u := range units {
		t.Cleanup(func() { os.Remove("/run/" + u + ".pre") })
		if err := s.Start(ctxFor(t, 10*time.Second), u); err != nil {
			t.Fatal(err)
		}
		pre, err := os.ReadFile("/run/" + u + ".pre")
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(show(t, u, "MainPID"))
		if err != nil || pid == 0 {
			t.Fatalf("%s: MainPID %q", u, show(t, u, "MainPID"))
		}
		main, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
		if err != nil {
			t.Fatal(err)
		}
		if string(pre) != string(main) {
			t.Errorf("%s: ExecStartPre= ran in %q, the main process runs in %q", u, pre, main)
		}
		if !control.InUnitCgroup(int32(pid), u) {
			t.Errorf("%s: a process in %q (ControlGroup %s) is not recognised as the unit's", u, main, show(t, u, "ControlGroup"))
		}
		if !control.InCgroup(int32(pid), show(t, u, "ControlGroup")) {
			t.Errorf("%s: a process in %q is not in ControlGroup %s", u, main, show(t, u, "ControlGroup"))
		}
		other := "ul-guard-cg-other.service"
		if control.InUnitCgroup(int32(pid), other) {
			t.Errorf("%s's process recognised as %s's", u, other)
		}
	}
}
