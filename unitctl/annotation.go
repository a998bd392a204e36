package unitctl

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Section is the unit file section that marks a unit as managed by
// unitlease. systemd ignores sections whose names start with "X-".
const Section = "X-UnitLease"

var sectionHeader = []byte("[" + Section + "]")

// Annotation is a unit that carries an [X-UnitLease] section in its
// fragment or one of its drop-ins, the lease it names and how the lease
// chooses among nodes.
//
// A key that no file sets, or that a later file resets with an empty
// value, has its default: no Prefer= list, Failback=no, and
// DefaultFailbackSettle, DefaultFailureThreshold and DefaultFailureWindow.
// parseAnnotation (and so Systemd.Discover) always returns an Annotation
// carrying them. An Annotation built in code does not: its zero
// FailureThreshold means "never" and its zero durations are invalid, so
// call SetDefaults on it first.
//
// Annotation holds a slice, so it is not comparable with ==; compare two
// with Equal.
type Annotation struct {
	Unit  string // the unit's name as systemd knows it, e.g. "vpn.service" or "vpn@eu.service"
	Lease string // the Lease= value, or the unit's name by default
	File  string // where the effective Lease= was set; without one, the last [X-UnitLease] header
	Line  int    // that line

	// Prefer is the Prefer= list: node names in order of preference,
	// most preferred first, each valid and listed once. nil by default.
	Prefer []string
	// Failback is Failback=: whether the holder hands the lease to a
	// more preferred node once that one has been ready for
	// FailbackSettle. false by default.
	Failback bool
	// FailbackSettle is FailbackSettle=, always > 0.
	FailbackSettle time.Duration
	// FailureThreshold is FailureThreshold=: how many failures of the
	// unit on this node within FailureWindow make the node stop
	// competing for the lease; 0 means never. From 0 to
	// MaxFailureThreshold.
	FailureThreshold int
	// FailureWindow is FailureWindow=, always > 0.
	FailureWindow time.Duration
}

// Defaults of the [X-UnitLease] keys that have one besides Lease= (the
// unit's name), Prefer= (none) and Failback= (no).
const (
	DefaultFailbackSettle   = 60 * time.Second
	DefaultFailureThreshold = 3
	DefaultFailureWindow    = 10 * time.Minute
)

// MaxFailureThreshold is the largest FailureThreshold= accepted.
const MaxFailureThreshold = 1000

// SetDefaults sets Prefer, Failback, FailbackSettle, FailureThreshold and
// FailureWindow to their defaults, the values of a unit whose
// [X-UnitLease] section sets none of these keys. It leaves Unit, Lease,
// File and Line alone.
func (a *Annotation) SetDefaults() {
	a.Prefer = nil
	a.Failback = false
	a.FailbackSettle = DefaultFailbackSettle
	a.FailureThreshold = DefaultFailureThreshold
	a.FailureWindow = DefaultFailureWindow
}

// Equal reports whether a and b are the same annotation, field by field
// (a nil and an empty Prefer are equal).
func (a Annotation) Equal(b Annotation) bool {
	return a.Unit == b.Unit && a.Lease == b.Lease && a.File == b.File && a.Line == b.Line &&
		slices.Equal(a.Prefer, b.Prefer) && a.Failback == b.Failback &&
		a.FailbackSettle == b.FailbackSettle && a.FailureThreshold == b.FailureThreshold &&
		a.FailureWindow == b.FailureWindow
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
// empty value resets the key to its default. Prefer= too is replaced, not
// appended to, by a later assignment. It returns nil and no error when no
// file has the section. contents holds each file's bytes, aligned with
// files.
//
// Every value but Lease='s is checked where it is assigned, so a bad value
// is an error even when a later file overrides it; Lease= is checked once
// its specifiers are expanded, as it is in effect.
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
			a.SetDefaults()
		}
		switch {
		case sets.leaseLine > 0:
			a.Lease, a.File, a.Line, leaseSet = sets.lease, file, sets.leaseLine, true
		case !leaseSet:
			a.File, a.Line = file, sets.headerLine
		}
		if sets.preferLine > 0 {
			a.Prefer = sets.prefer
		}
		if sets.failbackLine > 0 {
			a.Failback = sets.failback
		}
		if sets.failbackSettleLine > 0 {
			a.FailbackSettle = sets.failbackSettle
		}
		if sets.failureThresholdLine > 0 {
			a.FailureThreshold = sets.failureThreshold
		}
		if sets.failureWindowLine > 0 {
			a.FailureWindow = sets.failureWindow
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

// fileSettings is what one file says in its [X-UnitLease] sections. For
// each key, the last value the file assigns (parsed, with an empty value
// already turned into the key's default) and its line, 0 if the file does
// not assign the key.
type fileSettings struct {
	headerLine int    // line of the last section header
	lease      string // last Lease= value ("" resets)
	leaseLine  int

	prefer               []string
	preferLine           int
	failback             bool
	failbackLine         int
	failbackSettle       time.Duration
	failbackSettleLine   int
	failureThreshold     int
	failureThresholdLine int
	failureWindow        time.Duration
	failureWindowLine    int
}

// keys lists the [X-UnitLease] keys, for the unknown-key message.
const keys = "Lease=, Prefer=, Failback=, FailbackSettle=, FailureThreshold= and FailureWindow="

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
	if !ok {
		return fail("", fmt.Sprintf("%q is not KEY=VALUE", l.text))
	}
	switch key {
	case "Lease":
		s.lease, s.leaseLine = value, l.line
	case "Prefer":
		nodes, err := parsePrefer(value)
		if err != nil {
			return fail(key, err.Error())
		}
		s.prefer, s.preferLine = nodes, l.line
	case "Failback":
		b, ok := false, true
		if value != "" {
			b, ok = parseBoolean(value)
		}
		if !ok {
			return fail(key, fmt.Sprintf("want yes or no (or 1/0, true/false, on/off), not %q", value))
		}
		s.failback, s.failbackLine = b, l.line
	case "FailbackSettle":
		d, err := parseTimespanValue(value, DefaultFailbackSettle)
		if err != nil {
			return fail(key, err.Error())
		}
		s.failbackSettle, s.failbackSettleLine = d, l.line
	case "FailureThreshold":
		n := DefaultFailureThreshold
		if value != "" {
			var err error
			n, err = parseThreshold(value)
			if err != nil {
				return fail(key, err.Error())
			}
		}
		s.failureThreshold, s.failureThresholdLine = n, l.line
	case "FailureWindow":
		d, err := parseTimespanValue(value, DefaultFailureWindow)
		if err != nil {
			return fail(key, err.Error())
		}
		s.failureWindow, s.failureWindowLine = d, l.line
	default:
		return fail(key, "unknown key (the keys are "+keys+")")
	}
	return nil
}

// parsePrefer parses a Prefer= value: node names separated by whitespace,
// each valid and listed once. The empty value is the default, no list.
func parsePrefer(value string) ([]string, error) {
	var nodes []string
	for _, n := range strings.Fields(value) {
		if err := checkNodeName(n); err != nil {
			return nil, fmt.Errorf("%v (Prefer= takes node names separated by spaces)", err)
		}
		if slices.Contains(nodes, n) {
			return nil, fmt.Errorf("node %q is listed twice", n)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// maxNodeLen is the longest node name, as in redislease.
const maxNodeLen = 253

// checkNodeName is the rule of redislease.ValidNode, which unitctl does not
// import: 1 to 253 ASCII letters, digits, '.', '_' or '-', starting with a
// letter or digit. Keep the two alike: a Prefer= entry that ValidNode
// refuses names no node that could ever hold the lease.
func checkNodeName(name string) error {
	if name == "" || len(name) > maxNodeLen {
		return fmt.Errorf("node name %q must be 1 to %d characters", name, maxNodeLen)
	}
	for i, c := range name {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		case i == 0 && (c == '.' || c == '_' || c == '-'):
			return fmt.Errorf("node name %q starts with %q, not a letter or digit", name, c)
		default:
			return fmt.Errorf("node name %q: character %q at %d is not a letter, digit, '.', '_' or '-'", name, c, i)
		}
	}
	return nil
}

// parseBoolean parses a boolean as systemd does (parse_boolean):
// 1/yes/y/true/t/on or 0/no/n/false/f/off, in any case.
func parseBoolean(s string) (value, ok bool) {
	switch strings.ToLower(s) {
	case "1", "yes", "y", "true", "t", "on":
		return true, true
	case "0", "no", "n", "false", "f", "off":
		return false, true
	}
	return false, false
}

// parseThreshold parses a FailureThreshold= value: a whole number from 0
// to MaxFailureThreshold.
func parseThreshold(s string) (int, error) {
	bad := fmt.Errorf("want a whole number from 0 to %d, not %q", MaxFailureThreshold, s)
	if strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, bad
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n > MaxFailureThreshold {
		return 0, bad
	}
	return int(n), nil
}

// parseTimespanValue parses the value of a time-span key: the empty value
// is def, anything else must be a time span greater than 0.
func parseTimespanValue(s string, def time.Duration) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := parseTimespan(s)
	if err != nil {
		return 0, fmt.Errorf("want a time span greater than 0 such as \"90s\", \"5min\" or \"1h30m\", not %q: %v", s, err)
	}
	return d, nil
}

// timeUnits are the units parseTimespan accepts: Go's (time.ParseDuration)
// and systemd's (systemd.time(7)) up to weeks. systemd's months and years
// are left out: they are not whole days.
var timeUnits = map[string]time.Duration{
	"ns": time.Nanosecond, "nsec": time.Nanosecond,
	"us": time.Microsecond, "usec": time.Microsecond, "µs": time.Microsecond, "μs": time.Microsecond,
	"ms": time.Millisecond, "msec": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second, "seconds": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute, "minutes": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour, "hours": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour, "days": 24 * time.Hour,
	"w": 7 * 24 * time.Hour, "week": 7 * 24 * time.Hour, "weeks": 7 * 24 * time.Hour,
}

// parseTimespan parses a time span greater than 0, written in Go's syntax
// ("90s", "1h30m", "1.5h") or systemd's ("30sec", "5min", "2h 30min",
// "1d"): one or more numbers, each followed by a unit, optionally
// separated by spaces. A number without a unit is in seconds, as in
// systemd ("10" is ten seconds). Units are case-sensitive.
func parseTimespan(s string) (time.Duration, error) {
	rest := strings.TrimSpace(s)
	switch {
	case rest == "":
		return 0, errors.New("it is empty")
	case rest[0] == '-':
		return 0, errors.New("it is negative")
	}
	var total time.Duration
	for rest != "" {
		i := strings.IndexFunc(rest, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
		if i < 0 {
			i = len(rest)
		}
		number := rest[:i]
		rest = strings.TrimLeft(rest[i:], " \t")
		i = strings.IndexFunc(rest, func(r rune) bool { return !unicode.IsLetter(r) })
		if i < 0 {
			i = len(rest)
		}
		unitName := rest[:i]
		rest = strings.TrimLeft(rest[i:], " \t")

		whole, frac, _ := strings.Cut(number, ".")
		if whole == "" && frac == "" || strings.Contains(frac, ".") {
			if number == "" && unitName == "" {
				r, _ := utf8.DecodeRuneInString(rest)
				return 0, fmt.Errorf("%q is not a number", r)
			}
			return 0, fmt.Errorf("%q is not a number", number+unitName)
		}
		unit := time.Second
		if unitName != "" {
			var ok bool
			if unit, ok = timeUnits[unitName]; !ok {
				return 0, fmt.Errorf("unknown unit %q (use us, ms, s, min, h, d or w)", unitName)
			}
		}
		var d time.Duration
		if whole != "" {
			n, err := strconv.ParseUint(whole, 10, 63)
			if err != nil || n > uint64(math.MaxInt64/unit) {
				return 0, errors.New("it is too long")
			}
			d = time.Duration(n) * unit
		}
		if frac != "" {
			f, err := strconv.ParseFloat("0."+frac, 64)
			if err != nil {
				return 0, fmt.Errorf("%q is not a number", number)
			}
			d += time.Duration(f * float64(unit))
		}
		if d < 0 || total > math.MaxInt64-d {
			return 0, errors.New("it is too long")
		}
		total += d
	}
	if total <= 0 {
		return 0, errors.New("it is zero")
	}
	return total, nil
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
