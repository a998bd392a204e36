//go:build linux

package vmtests

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// allPIDs lists the processes visible in /proc.
func allPIDs() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after the command name,
// so that field 3 of proc(5) (state) is index 0.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strings.Fields(s[i+1:]), nil
}

// parentPID is field 4 of /proc/PID/stat.
func parentPID(pid int) int {
	f, err := statFields(pid)
	if err != nil || len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// startTime is field 22 of /proc/PID/stat: with the PID it names one
// process for good, since PIDs are reused.
func startTime(pid int) string {
	f, err := statFields(pid)
	if err != nil || len(f) < 20 {
		return ""
	}
	return f[19]
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(ppid int) []int {
	var out []int
	for _, pid := range allPIDs() {
		if parentPID(pid) == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// isNamespaceInit reports whether pid is PID 1 of a PID namespace below
// ours (the NSpid line of /proc/PID/status ends in 1).
func isNamespaceInit(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) >= 2 && f[len(f)-1] == "1"
		}
	}
	return false
}

// pidNamespace names the PID namespace of pid, e.g. "pid:[4026532301]".
func pidNamespace(pid int) string {
	ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	return ns
}

// processesInPidNS lists the live processes of a PID namespace.
func processesInPidNS(ns string) []int {
	var out []int
	if ns == "" {
		return out
	}
	for _, pid := range allPIDs() {
		if pidNamespace(pid) == ns {
			out = append(out, pid)
		}
	}
	return out
}

// owner names the process that owns a cluster, for the sweep of clusters
// left by a process that died without closing them.
type owner struct {
	pid   int
	start string
}

func selfOwner() owner {
	return owner{pid: os.Getpid(), start: startTime(os.Getpid())}
}

func (o owner) String() string { return fmt.Sprintf("%d %s\n", o.pid, o.start) }

func parseOwner(s string) (owner, bool) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return owner{}, false
	}
	pid, err := strconv.Atoi(f[0])
	return owner{pid: pid, start: f[1]}, err == nil
}

func (o owner) alive() bool {
	return o.pid > 0 && o.start != "" && startTime(o.pid) == o.start
}
