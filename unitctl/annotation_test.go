package unitctl

import (
	"errors"
	"strings"
	"testing"
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
			want:  &Annotation{Unit: "a.service", Lease: "a.service", File: "/f", Line: 4},
		},
		{
			name:  "lease in the fragment",
			unit:  "vpn.service",
			files: []file{{"/f", "[Service]\nExecStart=/bin/vpn\n[X-UnitLease]\n# comment\n; comment\nLease = vpn-gateway \n"}},
			want:  &Annotation{Unit: "vpn.service", Lease: "vpn-gateway", File: "/f", Line: 6},
		},
		{
			name: "a later drop-in overrides",
			unit: "vpn.service",
			files: []file{
				{"/f", "[X-UnitLease]\nLease=one\n"},
				{"/d/10-a.conf", "[Service]\nNice=1\n"},
				{"/d/20-b.conf", "[X-UnitLease]\nLease=two\n"},
			},
			want: &Annotation{Unit: "vpn.service", Lease: "two", File: "/d/20-b.conf", Line: 2},
		},
		{
			name: "a later section without Lease= keeps the earlier value and its place",
			unit: "vpn.service",
			files: []file{
				{"/f", "[X-UnitLease]\nLease=one\n"},
				{"/d/20-b.conf", "[X-UnitLease]\n"},
			},
			want: &Annotation{Unit: "vpn.service", Lease: "one", File: "/f", Line: 2},
		},
		{
			name: "an empty Lease= resets to the default",
			unit: "vpn.service",
			files: []file{
				{"/f", "[X-UnitLease]\nLease=one\n"},
				{"/d/20-b.conf", "[X-UnitLease]\nLease=\n"},
			},
			want: &Annotation{Unit: "vpn.service", Lease: "vpn.service", File: "/d/20-b.conf", Line: 2},
		},
		{
			name:  "only a drop-in has the section",
			unit:  "db.service",
			files: []file{{"/f", "[Service]\nExecStart=/bin/db\n"}, {"/d/lease.conf", "[X-UnitLease]\nLease=db\n"}},
			want:  &Annotation{Unit: "db.service", Lease: "db", File: "/d/lease.conf", Line: 2},
		},
		{
			name:  "the last assignment in a file wins",
			unit:  "a.service",
			files: []file{{"/f", "[X-UnitLease]\nLease=x\n[Service]\nLease=not-ours\n[X-UnitLease]\nLease=y\n"}},
			want:  &Annotation{Unit: "a.service", Lease: "y", File: "/f", Line: 6},
		},
		{
			name:  "specifiers of a template instance",
			unit:  "vpn@eu-west.service",
			files: []file{{"/lib/vpn@.service", "[X-UnitLease]\nLease=gw-%i.%p.%N:%n\n"}},
			want:  &Annotation{Unit: "vpn@eu-west.service", Lease: "gw-eu-west.vpn.vpn@eu-west:vpn@eu-west.service", File: "/lib/vpn@.service", Line: 2},
		},
		{
			name:  "continuation line",
			unit:  "a.service",
			files: []file{{"/f", "[X-UnitLease]\nLease=\\\nabc\n"}},
			want:  &Annotation{Unit: "a.service", Lease: "abc", File: "/f", Line: 2},
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
			case tt.want != nil && *got != *tt.want:
				t.Fatalf("got %+v, want %+v", *got, *tt.want)
			}
		})
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
	f.Fuzz(func(t *testing.T, text string) {
		a, err := parseAnnotation("x@y.service", []string{"/f"}, [][]byte{[]byte(text)})
		if err == nil && a != nil && checkLeaseName(a.Lease) != nil && a.Lease != a.Unit {
			t.Fatalf("accepted lease %q", a.Lease)
		}
	})
}
