package unitctl

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// unquoteExec splits an Exec*= line as systemd reads the words quoteWord
// writes: each in double quotes, with \", \\, \xNN and %% inside.
func unquoteExec(t *testing.T, line string) (prefix string, words []string) {
	t.Helper()
	i := strings.IndexByte(line, '"')
	if i < 0 {
		t.Fatalf("no quoted word in %q", line)
	}
	prefix, rest := line[:i], line[i:]
	for rest != "" {
		if rest[0] != '"' {
			t.Fatalf("word does not start with a quote at %q in %q", rest, line)
		}
		var w strings.Builder
		j := 1
		for ; j < len(rest) && rest[j] != '"'; j++ {
			switch c := rest[j]; {
			case c == '\\' && j+1 < len(rest) && rest[j+1] == 'x':
				v, err := strconv.ParseUint(rest[j+2:j+4], 16, 8)
				if err != nil {
					t.Fatalf("bad escape in %q", line)
				}
				w.WriteByte(byte(v))
				j += 3
			case c == '\\':
				j++
				w.WriteByte(rest[j])
			case c == '%':
				if rest[j+1] != '%' {
					t.Fatalf("a lone %% (a specifier systemd would expand) in %q", line)
				}
				w.WriteByte('%')
				j++
			default:
				w.WriteByte(c)
			}
		}
		if j >= len(rest) {
			t.Fatalf("unterminated word in %q", line)
		}
		words = append(words, w.String())
		rest = strings.TrimPrefix(rest[j+1:], " ")
	}
	return prefix, words
}

// FuzzRenderExec: a command the drop-in re-renders after the guard reads
// back as the same words, on one line, with no specifier systemd would
// expand: no unit's ExecStartPre= can smuggle a line or a %-expansion into
// the drop-in.
func FuzzRenderExec(f *testing.F) {
	f.Add("/bin/sh", "sh\x00-c\x00echo \"%n\" \\\n[Service]\nExecStart=/bin/evil", true)
	f.Add("/usr/bin/x", "other\x00a b\x00\x7f\t", false)
	f.Fuzz(func(t *testing.T, path, args string, privileged bool) {
		cmd := execCommand{Path: path, Argv: strings.Split(args, "\x00")}
		if privileged {
			cmd.Flags = []string{"privileged"}
		}
		line, err := renderExec(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if strings.ContainsAny(line, "\n\r\x00") {
			t.Fatalf("%q spans lines", line)
		}
		prefix, words := unquoteExec(t, line)
		want := cmd.Argv
		if len(want) == 0 || want[0] != path {
			want = append([]string{path}, want...)
			if !strings.HasSuffix(prefix, "@") {
				t.Fatalf("argv[0] differs from the path but the line %q has no @", line)
			}
		}
		if !slices.Equal(words, want) {
			t.Fatalf("%q reads back as %q, want %q", line, words, want)
		}
	})
}
