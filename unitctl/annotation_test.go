package unitctl

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// file is one unit file of a parser test.
type file struct{ name, text string }

func TestParseAnnotation(t *testing.T) {
	tests := []struct {
		name  string
		unit  string
		files []file
		want  *Annotation // nil: no annotation
	}{
		{
			name:  "no section",
			unit:  "a.service",
			files: []file{{"/etc/systemd/system/a.service", "[Service]\nExecStart=/bin/true\n"}},
		},
		{
			name:  "empty section means the unit's name",
			unit:  "a.service",
			files: []file{{"/f", "[Unit]\nDescription=x\n\n[X-UnitLease]\n"}},
			want:  def(Annotation{Unit: "a.service", Lease: "a.service", File: "/f", Line: 4}),
		},
		{
			name:  "lease in the fragment",
			unit:  "vpn.service",
			files: []file{{"/f", "[Service]\nExecStart=/bin/vpn\n[X-UnitLease]\n# comment\n; comment\nLease = vpn-gateway \n"}},
			want:  def(Annotation{Unit: "vpn.service", Lease: "vpn-gateway", File: "/f", Line: 6}),
		},
		{
			name: "a later drop-in overrides",
			unit: "vpn.service",
			files: []file{
				{"/f", "[X-UnitLease]\nLease=one\n"},
				{"/d/10-a.conf", "[Service]\nNice=1\n"},
				{"/d/20-b.conf", "[X-UnitLease]\nLease=two\n"},
			},
			want: def(Annotation{Unit: "vpn.service", Lease: "two", File: "/d/20-b.conf", Line: 2}),
		},
		{
			name: "a later section without Lease= keeps the earlier value and its place",
			unit: "vpn.service",
			files: []file{
				{"/f", "[X-UnitLease]\nLease=one\n"},
				{"/d/20-b.conf", "[X-UnitLease]\n"},
			},
			want: def(Annotation{Unit: "vpn.service", Lease: "one", File: "/f", Line: 2}),
		},
		{
			name: "an empty Lease= resets to the default",
			unit: "vpn.service",
			files: []file{
				{"/f", "[X-UnitLease]\nLease=one\n"},
				{"/d/20-b.conf", "[X-UnitLease]\nLease=\n"},
			},
			want: def(Annotation{Unit: "vpn.service", Lease: "vpn.service", File: "/d/20-b.conf", Line: 2}),
		},
		{
			name:  "only a drop-in has the section",
			unit:  "db.service",
			files: []file{{"/f", "[Service]\nExecStart=/bin/db\n"}, {"/d/lease.conf", "[X-UnitLease]\nLease=db\n"}},
			want:  def(Annotation{Unit: "db.service", Lease: "db", File: "/d/lease.conf", Line: 2}),
		},
		{
			name:  "the last assignment in a file wins",
			unit:  "a.service",
			files: []file{{"/f", "[X-UnitLease]\nLease=x\n[Service]\nLease=not-ours\n[X-UnitLease]\nLease=y\n"}},
			want:  def(Annotation{Unit: "a.service", Lease: "y", File: "/f", Line: 6}),
		},
		{
			name:  "specifiers of a template instance",
			unit:  "vpn@eu-west.service",
			files: []file{{"/lib/vpn@.service", "[X-UnitLease]\nLease=gw-%i.%p.%N:%n\n"}},
			want:  def(Annotation{Unit: "vpn@eu-west.service", Lease: "gw-eu-west.vpn.vpn@eu-west:vpn@eu-west.service", File: "/lib/vpn@.service", Line: 2}),
		},
		{
			name:  "continuation line",
			unit:  "a.service",
			files: []file{{"/f", "[X-UnitLease]\nLease=\\\nabc\n"}},
			want:  def(Annotation{Unit: "a.service", Lease: "abc", File: "/f", Line: 2}),
		},
		{
			name: "every key",
			unit: "vpn.service",
			files: []file{{"/f", "[X-UnitLease]\nLease=vpn\nPrefer=node-a  node-b\\\n node-c\nFailback=yes\n" +
				"FailbackSettle=2min\nFailureThreshold=5\nFailureWindow=1h30m\n"}},
			want: &Annotation{Unit: "vpn.service", Lease: "vpn", File: "/f", Line: 2,
				Prefer: []string{"node-a", "node-b", "node-c"}, Failback: true, FailbackSettle: 2 * time.Minute,
				FailureThreshold: 5, FailureWindow: 90 * time.Minute},
		},
		{
			name:  "a section name that only looks alike is not ours",
			unit:  "a.service",
			files: []file{{"/f", "[X-UnitLeases]\nFoo=1\n[x-unitlease]\nBar=2\n# [X-UnitLease]\n"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFiles(tt.unit, tt.files)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == nil && got != nil:
				t.Fatalf("got %+v, want no annotation", *got)
			case tt.want != nil && got == nil:
				t.Fatalf("got no annotation, want %+v", *tt.want)
			case tt.want != nil && !reflect.DeepEqual(*got, *tt.want):
				t.Fatalf("got %+v, want %+v", *got, *tt.want)
			}
		})
	}
}

// TestParseAnnotationKeys covers the keys besides Lease=: for each, its
// default, a value, an override by a later drop-in and a reset by an
// empty value.
func TestParseAnnotationKeys(t *testing.T) {
	const h = "[X-UnitLease]\n"
	tests := []struct {
		name  string
		files []file
		want  func(*Annotation) // applied to the defaults; nil: the defaults
	}{
		{name: "defaults", files: []file{{"/f", h}}},
		{name: "defaults, with a Lease=", files: []file{{"/f", h + "Lease=x\n"}}},
		{name: "another key does not reset one", files: []file{{"/f", h + "Failback=yes\n"}, {"/d/b.conf", h + "Prefer=a\n"}},
			want: func(a *Annotation) { a.Failback, a.Prefer = true, []string{"a"} }},

		// Prefer=
		{name: "Prefer= one node", files: []file{{"/f", h + "Prefer=node-a\n"}},
			want: func(a *Annotation) { a.Prefer = []string{"node-a"} }},
		{name: "Prefer= in order, any whitespace", files: []file{{"/f", h + "Prefer=\tn3 n1.example.com\t n_2 \n"}},
			want: func(a *Annotation) { a.Prefer = []string{"n3", "n1.example.com", "n_2"} }},
		{name: "Prefer= longest node name", files: []file{{"/f", h + "Prefer=" + strings.Repeat("n", 253) + "\n"}},
			want: func(a *Annotation) { a.Prefer = []string{strings.Repeat("n", 253)} }},
		{name: "Prefer= replaced by a later drop-in, not appended to", files: []file{{"/f", h + "Prefer=a b\n"}, {"/d/b.conf", h + "Prefer=c\n"}},
			want: func(a *Annotation) { a.Prefer = []string{"c"} }},
		{name: "Prefer= last in a file wins", files: []file{{"/f", h + "Prefer=a b\nPrefer=b a\n"}},
			want: func(a *Annotation) { a.Prefer = []string{"b", "a"} }},
		{name: "Prefer= kept by a drop-in without it", files: []file{{"/f", h + "Prefer=a b\n"}, {"/d/b.conf", h + "Lease=x\n"}},
			want: func(a *Annotation) { a.Prefer = []string{"a", "b"} }},
		{name: "Prefer= reset", files: []file{{"/f", h + "Prefer=a b\n"}, {"/d/b.conf", h + "Prefer=\n"}}},
		{name: "Prefer= reset then set", files: []file{{"/f", h + "Prefer=a\n"}, {"/d/b.conf", h + "Prefer=\nPrefer=b\n"}},
			want: func(a *Annotation) { a.Prefer = []string{"b"} }},

		// Failback=
		{name: "Failback=yes", files: []file{{"/f", h + "Failback=yes\n"}},
			want: func(a *Annotation) { a.Failback = true }},
		{name: "Failback=no", files: []file{{"/f", h + "Failback=no\n"}}},
		{name: "Failback= overridden", files: []file{{"/f", h + "Failback=on\n"}, {"/d/b.conf", h + "Failback=off\n"}}},
		{name: "Failback= overridden back", files: []file{{"/f", h + "Failback=0\n"}, {"/d/b.conf", h + "Failback=TRUE\n"}},
			want: func(a *Annotation) { a.Failback = true }},
		{name: "Failback= reset", files: []file{{"/f", h + "Failback=yes\n"}, {"/d/b.conf", h + "Failback=\n"}}},

		// FailbackSettle=
		{name: "FailbackSettle= Go syntax", files: []file{{"/f", h + "FailbackSettle=1m30s\n"}},
			want: func(a *Annotation) { a.FailbackSettle = 90 * time.Second }},
		{name: "FailbackSettle= systemd syntax", files: []file{{"/f", h + "FailbackSettle=2min 5sec\n"}},
			want: func(a *Annotation) { a.FailbackSettle = 125 * time.Second }},
		{name: "FailbackSettle= plain seconds", files: []file{{"/f", h + "FailbackSettle=10\n"}},
			want: func(a *Annotation) { a.FailbackSettle = 10 * time.Second }},
		{name: "FailbackSettle= overridden", files: []file{{"/f", h + "FailbackSettle=5min\n"}, {"/d/b.conf", h + "FailbackSettle=30s\n"}},
			want: func(a *Annotation) { a.FailbackSettle = 30 * time.Second }},
		{name: "FailbackSettle= reset", files: []file{{"/f", h + "FailbackSettle=5min\n"}, {"/d/b.conf", h + "FailbackSettle=\n"}}},

		// FailureThreshold=
		{name: "FailureThreshold= set", files: []file{{"/f", h + "FailureThreshold=10\n"}},
			want: func(a *Annotation) { a.FailureThreshold = 10 }},
		{name: "FailureThreshold=0 is never", files: []file{{"/f", h + "FailureThreshold=0\n"}},
			want: func(a *Annotation) { a.FailureThreshold = 0 }},
		{name: "FailureThreshold= the largest", files: []file{{"/f", h + "FailureThreshold=1000\n"}},
			want: func(a *Annotation) { a.FailureThreshold = 1000 }},
		{name: "FailureThreshold= leading zeros", files: []file{{"/f", h + "FailureThreshold=007\n"}},
			want: func(a *Annotation) { a.FailureThreshold = 7 }},
		{name: "FailureThreshold= overridden", files: []file{{"/f", h + "FailureThreshold=10\n"}, {"/d/b.conf", h + "FailureThreshold=1\n"}},
			want: func(a *Annotation) { a.FailureThreshold = 1 }},
		{name: "FailureThreshold= reset", files: []file{{"/f", h + "FailureThreshold=0\n"}, {"/d/b.conf", h + "FailureThreshold=\n"}}},

		// FailureWindow=
		{name: "FailureWindow= set", files: []file{{"/f", h + "FailureWindow=1h\n"}},
			want: func(a *Annotation) { a.FailureWindow = time.Hour }},
		{name: "FailureWindow= days", files: []file{{"/f", h + "FailureWindow=1d\n"}},
			want: func(a *Annotation) { a.FailureWindow = 24 * time.Hour }},
		{name: "FailureWindow= overridden", files: []file{{"/f", h + "FailureWindow=1h\n"}, {"/d/b.conf", h + "FailureWindow=30min\n"}},
			want: func(a *Annotation) { a.FailureWindow = 30 * time.Minute }},
		{name: "FailureWindow= reset", files: []file{{"/f", h + "FailureWindow=1h\n"}, {"/d/b.conf", h + "FailureWindow=\n"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFiles("a.service", tt.files)
			if err != nil {
				t.Fatal(err)
			}
			if got == nil {
				t.Fatal("no annotation")
			}
			want := def(Annotation{Unit: got.Unit, Lease: got.Lease, File: got.File, Line: got.Line})
			if tt.want != nil {
				tt.want(want)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("got %+v, want %+v", *got, *want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	var a Annotation
	a.SetDefaults()
	if a.Prefer != nil || a.Failback || a.FailbackSettle != 60*time.Second || a.FailureThreshold != 3 || a.FailureWindow != 10*time.Minute {
		t.Fatalf("defaults %+v", a)
	}
	b := a
	b.Prefer = []string{}
	if !a.Equal(b) {
		t.Error("a nil and an empty Prefer differ")
	}
	b.Prefer = []string{"x"}
	if a.Equal(b) {
		t.Error("different Prefer lists are equal")
	}
}

func TestParseTimespan(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration // 0: an error
		err  string        // in the error
	}{
		{in: "90s", want: 90 * time.Second},
		{in: "10m", want: 10 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "1.5h", want: 90 * time.Minute},
		{in: ".5s", want: 500 * time.Millisecond},
		{in: "300ms", want: 300 * time.Millisecond},
		{in: "250us", want: 250 * time.Microsecond},
		{in: "250µs", want: 250 * time.Microsecond},
		{in: "1ns", want: 1},
		{in: "30sec", want: 30 * time.Second},
		{in: "1second", want: time.Second},
		{in: "2seconds", want: 2 * time.Second},
		{in: "5min", want: 5 * time.Minute},
		{in: "5 min", want: 5 * time.Minute},
		{in: "2minutes", want: 2 * time.Minute},
		{in: "2h", want: 2 * time.Hour},
		{in: "2hr", want: 2 * time.Hour},
		{in: "1hour", want: time.Hour},
		{in: "1d", want: 24 * time.Hour},
		{in: "2days", want: 48 * time.Hour},
		{in: "1w", want: 7 * 24 * time.Hour},
		{in: "1h 30min", want: 90 * time.Minute},
		{in: "1min 30", want: 90 * time.Second},
		{in: "10", want: 10 * time.Second},
		{in: "0.5", want: 500 * time.Millisecond},
		{in: "00010s", want: 10 * time.Second},
		{in: "2562047h", want: 2562047 * time.Hour},

		{in: "", err: "empty"},
		{in: "0", err: "zero"},
		{in: "0s", err: "zero"},
		{in: "0h 0min", err: "zero"},
		{in: "0.0000000001s", err: "zero"},
		{in: "-5s", err: "negative"},
		{in: "+5s", err: `'+' is not a number`},
		{in: "x", err: `"x" is not a number`},
		{in: "s", err: `"s" is not a number`},
		{in: "5x", err: `unknown unit "x"`},
		{in: "5M", err: `unknown unit "M"`},
		{in: "5MIN", err: `unknown unit "MIN"`},
		{in: "1y", err: `unknown unit "y"`},
		{in: "1.2.3s", err: `"1.2.3s" is not a number`},
		{in: ".", err: `"." is not a number`},
		{in: "5s,", err: `',' is not a number`},
		{in: "5s€", err: `'€' is not a number`},
		{in: "1e3s", err: `unknown unit "e"`},
		{in: "infinity", err: `"infinity" is not a number`},
		{in: "2562048h", err: "too long"},
		{in: "99999999999999999999s", err: "too long"},
		{in: "2562047h 2562047h", err: "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseTimespan(tt.in)
			switch {
			case tt.want != 0 && err != nil:
				t.Fatalf("parseTimespan(%q): %v, want %v", tt.in, err, tt.want)
			case tt.want != 0 && got != tt.want:
				t.Fatalf("parseTimespan(%q) = %v, want %v", tt.in, got, tt.want)
			case tt.want == 0 && err == nil:
				t.Fatalf("parseTimespan(%q) = %v, want an error", tt.in, got)
			case tt.want == 0 && !strings.Contains(err.Error(), tt.err):
				t.Fatalf("parseTimespan(%q): %q does not contain %q", tt.in, err, tt.err)
			}
		})
	}
}

// TestParseTimespanAgreesWithGo: what time.ParseDuration accepts as
// greater than 0, parseTimespan reads the same.
func TestParseTimespanAgreesWithGo(t *testing.T) {
	for _, s := range []string{"1h", "1h2m3s", "1.25m", "3m0.5s", "1h0m0.000000001s", "7ms", "2h45m", "15s", "0.5h"} {
		want, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := parseTimespan(s); err != nil || got != want {
			t.Errorf("parseTimespan(%q) = %v, %v; time.ParseDuration says %v", s, got, err, want)
		}
	}
}

func TestParseBoolean(t *testing.T) {
	for _, s := range []string{"1", "yes", "y", "true", "t", "on", "YES", "Y", "True", "T", "ON", "oN"} {
		if v, ok := parseBoolean(s); !v || !ok {
			t.Errorf("parseBoolean(%q) = %v, %v; want true", s, v, ok)
		}
	}
	for _, s := range []string{"0", "no", "n", "false", "f", "off", "NO", "N", "False", "F", "OFF"} {
		if v, ok := parseBoolean(s); v || !ok {
			t.Errorf("parseBoolean(%q) = %v, %v; want false", s, v, ok)
		}
	}
	for _, s := range []string{"", "2", "yess", "enable", "nope", " yes", "of"} {
		if _, ok := parseBoolean(s); ok {
			t.Errorf("parseBoolean(%q) accepted", s)
		}
	}
}

// TestCheckNodeName pins the rule of redislease.ValidNode that
// checkNodeName mirrors.
func TestCheckNodeName(t *testing.T) {
	for _, s := range []string{"a", "A", "0", "node-a", "n1.example.com", "a_b", "a-", "a.", strings.Repeat("x", 253)} {
		if err := checkNodeName(s); err != nil {
			t.Errorf("checkNodeName(%q): %v", s, err)
		}
	}
	for _, s := range []string{"", "-a", ".a", "_a", "a b", "a!", "né", "a:b", "a/b", strings.Repeat("x", 254)} {
		if err := checkNodeName(s); err == nil {
			t.Errorf("checkNodeName(%q) accepted", s)
		}
	}
}

func TestParseAnnotationErrors(t *testing.T) {
	tests := []struct {
		name  string
		files []file
		want  AnnotationError // Unit is always "a.service"
		text  string          // in Error()
	}{
		{
			name:  "unknown key",
			files: []file{{"/etc/systemd/system/a.service", "[Service]\nExecStart=/bin/a\n\n[X-UnitLease]\nLease=x\nLeese=y\n"}},
			want:  AnnotationError{File: "/etc/systemd/system/a.service", Line: 6, Key: "Leese"},
			text:  "/etc/systemd/system/a.service:6: [X-UnitLease] of a.service: Leese=: unknown key",
		},
		{
			name:  "not KEY=VALUE",
			files: []file{{"/f", "[X-UnitLease]\nLease x\n"}},
			want:  AnnotationError{File: "/f", Line: 2},
			text:  `/f:2: [X-UnitLease] of a.service: "Lease x" is not KEY=VALUE`,
		},
		{
			name:  "bad character, in a drop-in",
			files: []file{{"/f", "[X-UnitLease]\nLease=ok\n"}, {"/d/x.conf", "\n\n[X-UnitLease]\nLease=has space\n"}},
			want:  AnnotationError{File: "/d/x.conf", Line: 4, Key: "Lease"},
			text:  `/d/x.conf:4: [X-UnitLease] of a.service: Lease=: "has space" contains ' '`,
		},
		{
			name:  "unsupported specifier",
			files: []file{{"/f", "[X-UnitLease]\nLease=%H\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Lease"},
			text:  "specifier %H is not supported",
		},
		{
			name:  "lone percent",
			files: []file{{"/f", "[X-UnitLease]\nLease=a%\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Lease"},
			text:  "lone %",
		},
		{
			name:  "too long",
			files: []file{{"/f", "[X-UnitLease]\nLease=" + strings.Repeat("x", maxLeaseLen+1) + "\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Lease"},
			text:  "longer than 200 bytes",
		},
		{
			name:  "error line is the first line of a continued line",
			files: []file{{"/f", "[X-UnitLease]\n\nBogus=a \\\n  b\nLease=x\n"}},
			want:  AnnotationError{File: "/f", Line: 3, Key: "Bogus"},
			text:  "/f:3:",
		},
		{
			name:  "non-ASCII",
			files: []file{{"/f", "[X-UnitLease]\nLease=gré\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Lease"},
			text:  "contains 'é'",
		},
		{
			name:  "unknown key lists every key",
			files: []file{{"/f", "[X-UnitLease]\nPreferred=a\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Preferred"},
			text:  "/f:2: [X-UnitLease] of a.service: Preferred=: unknown key (the keys are Lease=, Prefer=, Failback=, FailbackSettle=, FailureThreshold= and FailureWindow=)",
		},
		{
			name:  "keys are case-sensitive",
			files: []file{{"/f", "[X-UnitLease]\nfailback=yes\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "failback"},
			text:  "failback=: unknown key",
		},
		{
			name:  "Prefer= bad character",
			files: []file{{"/f", "[X-UnitLease]\nPrefer=a b!\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Prefer"},
			text:  `/f:2: [X-UnitLease] of a.service: Prefer=: node name "b!": character '!' at 1 is not a letter, digit, '.', '_' or '-' (Prefer= takes node names separated by spaces)`,
		},
		{
			name:  "Prefer= bad first character",
			files: []file{{"/f", "[X-UnitLease]\nPrefer=-a\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Prefer"},
			text:  `/f:2: [X-UnitLease] of a.service: Prefer=: node name "-a" starts with '-', not a letter or digit`,
		},
		{
			name:  "Prefer= non-ASCII",
			files: []file{{"/f", "[X-UnitLease]\nPrefer=nœud\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Prefer"},
			text:  `Prefer=: node name "nœud": character 'œ' at 1`,
		},
		{
			name:  "Prefer= too long",
			files: []file{{"/f", "[X-UnitLease]\nPrefer=a " + strings.Repeat("x", 254) + "\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Prefer"},
			text:  "must be 1 to 253 characters",
		},
		{
			name:  "Prefer= node listed twice, in a drop-in",
			files: []file{{"/f", "[X-UnitLease]\nPrefer=a\n"}, {"/d/b.conf", "[Unit]\n[X-UnitLease]\nPrefer=a b a\n"}},
			want:  AnnotationError{File: "/d/b.conf", Line: 3, Key: "Prefer"},
			text:  `/d/b.conf:3: [X-UnitLease] of a.service: Prefer=: node "a" is listed twice`,
		},
		{
			name:  "Failback= not a boolean",
			files: []file{{"/f", "[X-UnitLease]\nFailback=maybe\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "Failback"},
			text:  `/f:2: [X-UnitLease] of a.service: Failback=: want yes or no (or 1/0, true/false, on/off), not "maybe"`,
		},
		{
			name:  "FailbackSettle= garbage",
			files: []file{{"/f", "[X-UnitLease]\nFailbackSettle=soon\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailbackSettle"},
			text:  `/f:2: [X-UnitLease] of a.service: FailbackSettle=: want a time span greater than 0 such as "90s", "5min" or "1h30m", not "soon": "soon" is not a number`,
		},
		{
			name:  "FailbackSettle= zero",
			files: []file{{"/f", "[X-UnitLease]\nFailbackSettle=0\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailbackSettle"},
			text:  `/f:2: [X-UnitLease] of a.service: FailbackSettle=: want a time span greater than 0 such as "90s", "5min" or "1h30m", not "0": it is zero`,
		},
		{
			name:  "FailbackSettle= negative",
			files: []file{{"/f", "[X-UnitLease]\nFailbackSettle=-1m\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailbackSettle"},
			text:  `FailbackSettle=: want a time span greater than 0 such as "90s", "5min" or "1h30m", not "-1m": it is negative`,
		},
		{
			name:  "FailbackSettle= unknown unit",
			files: []file{{"/f", "[X-UnitLease]\nFailbackSettle=1M\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailbackSettle"},
			text:  `not "1M": unknown unit "M" (use us, ms, s, min, h, d or w)`,
		},
		{
			name:  "FailureThreshold= not a number",
			files: []file{{"/f", "[X-UnitLease]\nFailureThreshold=x\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureThreshold"},
			text:  `/f:2: [X-UnitLease] of a.service: FailureThreshold=: want a whole number from 0 to 1000, not "x"`,
		},
		{
			name:  "FailureThreshold= too large",
			files: []file{{"/f", "[X-UnitLease]\nFailureThreshold=1001\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureThreshold"},
			text:  `FailureThreshold=: want a whole number from 0 to 1000, not "1001"`,
		},
		{
			name:  "FailureThreshold= overflows",
			files: []file{{"/f", "[X-UnitLease]\nFailureThreshold=99999999999999999999999\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureThreshold"},
			text:  `want a whole number from 0 to 1000, not "99999999999999999999999"`,
		},
		{
			name:  "FailureThreshold= negative",
			files: []file{{"/f", "[X-UnitLease]\nFailureThreshold=-1\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureThreshold"},
			text:  `want a whole number from 0 to 1000, not "-1"`,
		},
		{
			name:  "FailureThreshold= signed",
			files: []file{{"/f", "[X-UnitLease]\nFailureThreshold=+3\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureThreshold"},
			text:  `want a whole number from 0 to 1000, not "+3"`,
		},
		{
			name:  "FailureThreshold= fraction",
			files: []file{{"/f", "[X-UnitLease]\nFailureThreshold=2.5\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureThreshold"},
			text:  `want a whole number from 0 to 1000, not "2.5"`,
		},
		{
			name:  "FailureWindow= zero",
			files: []file{{"/f", "[X-UnitLease]\nFailureWindow=0s\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureWindow"},
			text:  `/f:2: [X-UnitLease] of a.service: FailureWindow=: want a time span greater than 0 such as "90s", "5min" or "1h30m", not "0s": it is zero`,
		},
		{
			name:  "FailureWindow= garbage, in a drop-in, on a continued line",
			files: []file{{"/f", "[X-UnitLease]\nFailureWindow=1h\n"}, {"/d/b.conf", "[X-UnitLease]\n\nFailureWindow=10 \\\n  minutes later\n"}},
			want:  AnnotationError{File: "/d/b.conf", Line: 3, Key: "FailureWindow"},
			text:  `/d/b.conf:3: [X-UnitLease] of a.service: FailureWindow=: want a time span greater than 0 such as "90s", "5min" or "1h30m", not "10  minutes later": "later" is not a number`,
		},
		{
			name:  "a bad value is an error even when a later drop-in overrides it",
			files: []file{{"/f", "[X-UnitLease]\nFailureWindow=never\n"}, {"/d/b.conf", "[X-UnitLease]\nFailureWindow=1h\n"}},
			want:  AnnotationError{File: "/f", Line: 2, Key: "FailureWindow"},
			text:  `not "never"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFiles("a.service", tt.files)
			var ae *AnnotationError
			if !errors.As(err, &ae) {
				t.Fatalf("got %+v, %v; want an *AnnotationError", got, err)
			}
			if ae.Unit != "a.service" || ae.File != tt.want.File || ae.Line != tt.want.Line || ae.Key != tt.want.Key {
				t.Errorf("error at %s:%d key %q of %s, want %s:%d key %q", ae.File, ae.Line, ae.Key, ae.Unit, tt.want.File, tt.want.Line, tt.want.Key)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error %q does not contain %q", err, tt.text)
			}
		})
	}
}

// def is a with the defaults of the keys other than Lease=.
func def(a Annotation) *Annotation {
	a.SetDefaults()
	return &a
}

func parseFiles(unit string, files []file) (*Annotation, error) {
	var names []string
	var contents [][]byte
	for _, f := range files {
		names = append(names, f.name)
		contents = append(contents, []byte(f.text))
	}
	return parseAnnotation(unit, names, contents)
}

func FuzzParseAnnotation(f *testing.F) {
	f.Add("[X-UnitLease]\nLease=a-%i\\\n b\n")
	f.Add("[X-UnitLease]\n=\n[")
	f.Add("[X-UnitLease]\nPrefer=a b c\nFailback=on\nFailbackSettle=1m30s\nFailureThreshold=0\nFailureWindow=2h 30min\n")
	f.Add("[X-UnitLease]\nPrefer=\nFailback=\nFailbackSettle=\nFailureThreshold=\nFailureWindow=\n")
	f.Add("[X-UnitLease]\nFailureWindow=.5\nFailbackSettle=1.5h\nPrefer=a a\n")
	f.Fuzz(func(t *testing.T, text string) {
		a, err := parseAnnotation("x@y.service", []string{"/f"}, [][]byte{[]byte(text)})
		if err != nil {
			var ae *AnnotationError
			if !errors.As(err, &ae) || ae.Unit != "x@y.service" || ae.File != "/f" || ae.Line < 1 {
				t.Fatalf("error %v is not an *AnnotationError of /f", err)
			}
			return
		}
		if a == nil {
			return
		}
		if checkLeaseName(a.Lease) != nil && a.Lease != a.Unit {
			t.Fatalf("accepted lease %q", a.Lease)
		}
		if a.FailbackSettle <= 0 || a.FailureWindow <= 0 || a.FailureThreshold < 0 || a.FailureThreshold > MaxFailureThreshold {
			t.Fatalf("accepted %+v", *a)
		}
		if a.Prefer != nil && len(a.Prefer) == 0 {
			t.Fatalf("empty, non-nil Prefer")
		}
		seen := map[string]bool{}
		for _, n := range a.Prefer {
			if checkNodeName(n) != nil || seen[n] {
				t.Fatalf("accepted Prefer %q", a.Prefer)
			}
			seen[n] = true
		}
	})
}
