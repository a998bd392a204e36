package unitctl

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// The file and line that set a value systemd applies, for the messages
// of refusals and of verification. They are read from the unit's files as
// systemd lists them (FragmentPath, then DropInPaths, in the order it
// applies them) and as they are on disk now: a file changed since the
// last reload tells what systemd will apply after the next one, and a
// file gone since is skipped. `systemctl set-property` writes drop-ins
// that systemd lists too (under system.control); a value no file sets (a
// default) has no origin.

// unitFiles lists a unit's files in the order systemd applies them: its
// fragment (none for a masked unit, whose fragment is /dev/null), then its
// drop-ins.
func unitFiles(fragment string, dropIns []string) []string {
	var files []string
	if fragment != "" && fragment != "/dev/null" {
		files = append(files, fragment)
	}
	return append(files, dropIns...)
}

// assignment is one KEY=VALUE line of a unit file.
type assignment struct {
	file  string
	line  int
	value string // trimmed; "" resets the setting
}

// assignments lists, in the order systemd applies them, the lines of s's
// files that assign one of keys in section.
func (s settings) assignments(section string, keys ...string) []assignment {
	var out []assignment
	for _, file := range unitFiles(s.FragmentPath, s.DropInPaths) {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for l := range unitLines(data) {
			if l.header || l.section != section {
				continue
			}
			key, value, ok := strings.Cut(l.text, "=")
			if ok && slices.Contains(keys, strings.TrimSpace(key)) {
				out = append(out, assignment{file: file, line: l.line, value: strings.TrimSpace(value)})
			}
		}
	}
	return out
}

// setIn says where the value of a single-valued setting comes from: the
// last assignment of one of keys (the setting's name, and any other name
// that sets it too, as TimeoutSec= sets TimeoutStopSec=) in section. It
// is " (set in FILE:LINE)", " (reset to the default in FILE:LINE)" for an
// empty assignment, or "" if no file assigns it.
func (s settings) setIn(section string, keys ...string) string {
	as := s.assignments(section, keys...)
	if len(as) == 0 {
		return ""
	}
	a := as[len(as)-1]
	if a.value == "" {
		return fmt.Sprintf(" (reset to the default in %s:%d)", a.file, a.line)
	}
	return fmt.Sprintf(" (set in %s:%d)", a.file, a.line)
}

// listIn says where the commands of a list setting come from: every
// assignment of key in section since the last empty one, which empties
// the list: "emptied in FILE:LINE, then set in FILE:LINE,LINE, FILE:LINE".
// It is "" if no file assigns key.
func (s settings) listIn(section, key string) string {
	var reset *assignment
	var since []assignment
	for _, a := range s.assignments(section, key) {
		if a.value == "" {
			reset, since = &a, nil
		} else {
			since = append(since, a)
		}
	}
	var parts []string
	if reset != nil {
		parts = append(parts, fmt.Sprintf("emptied in %s:%d", reset.file, reset.line))
	}
	if len(since) > 0 {
		parts = append(parts, "set in "+places(since))
	}
	return strings.Join(parts, ", then ")
}

// places lists where assignments are, the lines of one file together:
// "/a.conf:3,4, /b.conf:2".
func places(as []assignment) string {
	var b strings.Builder
	for i, a := range as {
		switch {
		case i == 0:
			fmt.Fprintf(&b, "%s:%d", a.file, a.line)
		case a.file == as[i-1].file:
			fmt.Fprintf(&b, ",%d", a.line)
		default:
			fmt.Fprintf(&b, ", %s:%d", a.file, a.line)
		}
	}
	return b.String()
}

// stopCommandsIn says where the ExecStop= and ExecStopPost= commands that
// make up the stop's phases come from: " (ExecStop= set in FILE:LINE)",
// or "" if the unit has none.
func (s settings) stopCommandsIn() string {
	var parts []string
	for _, l := range []struct {
		key  string
		cmds []execCommand
	}{{"ExecStop", s.ExecStop}, {"ExecStopPost", s.ExecStopPost}} {
		if len(l.cmds) == 0 {
			continue
		}
		if in := s.listIn("Service", l.key); in != "" {
			parts = append(parts, l.key+"= "+in)
		}
	}
	return paren(strings.Join(parts, "; "))
}

// paren is " (s)", or "" for an empty s.
func paren(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
