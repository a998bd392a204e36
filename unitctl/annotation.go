package unitctl

import (
	"bytes"
	"fmt"
	"iter"
	"strings"
)

// Section is the unit file section that marks a unit as managed by
// unitlease. systemd ignores sections whose names start with "X-".
const Section = "X-UnitLease"

var sectionHeader = []byte("[" + Section + "]")

// Annotation is a unit that carries an [X-UnitLease] section in its
// fragment or one of its drop-ins, and the lease it names.
type Annotation struct {
	Unit  string // the unit's name as systemd knows it, e.g. "vpn.service" or "vpn@eu.service"
	Lease string // the Lease= value, or the unit's name by default
	File  string // where the effective Lease= was set; without one, the last [X-UnitLease] header
	Line  int    // that line
}

// AnnotationError is a malformed [X-UnitLease] section: an unknown key, a
// bad value or a line that is not KEY=VALUE. The unit it belongs to is not
// managed.
type AnnotationError struct {
	Unit string
	File string
	Line int
	Key  string // empty for a line that is not KEY=VALUE
	Msg  string
}

func (e *AnnotationError) Error() string {
	where := fmt.Sprintf("%s:%d", e.File, e.Line)
	if e.Key == "" {
		return fmt.Sprintf("%s: [%s] of %s: %s", where, Section, e.Unit, e.Msg)
	}
	return fmt.Sprintf("%s: [%s] of %s: %s=: %s", where, Section, e.Unit, e.Key, e.Msg)
}

// maxLeaseLen bounds a lease name, which becomes part of a Redis key.
const maxLeaseLen = 200

// parseAnnotation reads the [X-UnitLease] sections of one unit's files, in
// the order systemd applies them (fragment first, then drop-ins), with
// systemd's semantics: a later assignment overrides an earlier one and an
// empty value resets the key to its default. It returns nil and no error
// when no file has the section. contents holds each file's bytes, aligned
// with files.
func parseAnnotation(unit string, files []string, contents [][]byte) (*Annotation, error) {
	var a *Annotation
	leaseSet := false
	for i, file := range files {
		sets, found, err := parseFile(unit, file, contents[i])
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if a == nil {
			a = &Annotation{Unit: unit}
		}
		switch {
		case sets.leaseLine > 0:
			a.Lease, a.File, a.Line, leaseSet = sets.lease, file, sets.leaseLine, true
		case !leaseSet:
			a.File, a.Line = file, sets.headerLine
		}
	}
	if a == nil {
		return nil, nil
	}
	// The names come from D-Bus messages: copies keep a long-lived
	// annotation from holding on to the messages' buffers.
	a.Unit, a.File = strings.Clone(a.Unit), strings.Clone(a.File)
	return a, a.expand()
}

// expand resolves the default and the specifiers of Lease=.
func (a *Annotation) expand() error {
	if a.Lease == "" {
		a.Lease = a.Unit
		return nil
	}
	lease, err := expandSpecifiers(a.Lease, a.Unit)
	if err == nil {
		err = checkLeaseName(lease)
	}
	if err != nil {
		return &AnnotationError{Unit: a.Unit, File: a.File, Line: a.Line, Key: "Lease", Msg: err.Error()}
	}
	a.Lease = lease
	return nil
}

// fileSettings is what one file says in its [X-UnitLease] sections.
type fileSettings struct {
	headerLine int    // line of the last section header
	lease      string // last Lease= value ("" resets)
	leaseLine  int    // its line, 0 if the file has no Lease=
}

// parseFile parses one unit file. Lines outside [X-UnitLease] are left to
// systemd. Continuation lines (a trailing backslash) are joined as systemd
// joins them; an error names the logical line's first line.
func parseFile(unit, file string, data []byte) (fileSettings, bool, error) {
	var s fileSettings
	if !bytes.Contains(data, sectionHeader) {
		return s, false, nil
	}
	found := false
	for l := range unitLines(data) {
		switch {
		case l.section != Section:
		case l.header:
			found, s.headerLine = true, l.line
		default:
			if err := s.set(unit, file, l.logicalLine); err != nil {
				return s, false, err
			}
		}
	}
	return s, found, nil
}

// set applies one KEY=VALUE line of the section.
func (s *fileSettings) set(unit, file string, l logicalLine) error {
	key, value, ok := strings.Cut(l.text, "=")
	key, value = strings.TrimSpace(key), strings.TrimSpace(value)
	fail := func(key, msg string) error {
		return &AnnotationError{Unit: unit, File: file, Line: l.line, Key: key, Msg: msg}
	}
	switch {
	case !ok:
		return fail("", fmt.Sprintf("%q is not KEY=VALUE", l.text))
	case key != "Lease":
		return fail(key, "unknown key (the only key is Lease=)")
	}
	s.lease, s.leaseLine = value, l.line
	return nil
}

// unitLine is a logical line of a unit file that is neither blank nor a
// comment: a section header, or a line of the section it is in.
type unitLine struct {
	logicalLine
	section string // the section the line is in; for a header, the one it opens ("" if malformed)
	header  bool
}

// unitLines yields the lines of a unit file that are neither blank nor
// comments, each with its section. A line before the first header has
// the section "".
func unitLines(data []byte) iter.Seq[unitLine] {
	return func(yield func(unitLine) bool) {
		section := ""
		for l := range logicalLines(data) {
			header := false
			switch {
			case l.text == "" || l.text[0] == '#' || l.text[0] == ';':
				continue
			case l.text[0] == '[':
				name, ok := strings.CutSuffix(l.text[1:], "]")
				if !ok {
					name = ""
				}
				section, header = name, true
			}
			if !yield(unitLine{l, section, header}) {
				return
			}
		}
	}
}

// logicalLine is one line after joining continuations.
type logicalLine struct {
	text string // trimmed
	line int    // 1-based number of its first physical line
}

// logicalLines yields the lines of data, joining a line that ends in a
// backslash with the next one (systemd replaces the backslash with a
// space). Comment lines inside a continuation are skipped, as systemd
// does.
func logicalLines(data []byte) func(yield func(logicalLine) bool) {
	return func(yield func(logicalLine) bool) {
		var cur strings.Builder
		start := 0
		for i, raw := range strings.Split(string(data), "\n") {
			text := strings.TrimSpace(raw)
			if cur.Len() > 0 && (strings.HasPrefix(text, "#") || strings.HasPrefix(text, ";")) {
				continue
			}
			if cur.Len() == 0 {
				start = i + 1
			}
			if cont, ok := strings.CutSuffix(text, `\`); ok {
				cur.WriteString(cont + " ")
				continue
			}
			cur.WriteString(text)
			if !yield(logicalLine{strings.TrimSpace(cur.String()), start}) {
				return
			}
			cur.Reset()
		}
		if cur.Len() > 0 {
			yield(logicalLine{strings.TrimSpace(cur.String()), start})
		}
	}
}

// expandSpecifiers resolves the unit specifiers that make sense in a lease
// name: %n (full name), %N (name without type suffix), %p (prefix), %i
// (instance) and %% (a percent sign). systemd does not expand them in X-
// sections, so unitlease does.
func expandSpecifiers(s, unit string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q ends in a lone %%", s)
		}
		i++
		v, ok := specifier(s[i], unit)
		if !ok {
			return "", fmt.Errorf("specifier %%%c is not supported (only %%n %%N %%p %%i %%%%)", s[i])
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func specifier(c byte, unit string) (string, bool) {
	name := unit[:len(unit)-len(unitSuffix(unit))]
	prefix, instance, _ := strings.Cut(name, "@")
	switch c {
	case 'n':
		return unit, true
	case 'N':
		return name, true
	case 'p':
		return prefix, true
	case 'i':
		return instance, true
	case '%':
		return "%", true
	}
	return "", false
}

// unitSuffix is the type suffix of a unit name, with its dot.
func unitSuffix(unit string) string {
	if i := strings.LastIndexByte(unit, '.'); i >= 0 {
		return unit[i:]
	}
	return ""
}

// ValidLeaseName reports whether s can name a lease: what Lease= accepts.
func ValidLeaseName(s string) error {
	if s == "" {
		return fmt.Errorf(`"" is empty`)
	}
	return checkLeaseName(s)
}

// checkLeaseName accepts the characters of unit names (ASCII letters,
// digits and ":-_.@\"), which are safe in a Redis key and a journal field.
func checkLeaseName(s string) error {
	if len(s) > maxLeaseLen {
		return fmt.Errorf("%q is longer than %d bytes", s, maxLeaseLen)
	}
	for _, r := range s {
		ok := r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(`:-_.@\`, r))
		if !ok {
			return fmt.Errorf("%q contains %q; a lease name may use letters, digits and :-_.@\\", s, r)
		}
	}
	return nil
}
