package unitctl

import (
	"fmt"
	"slices"
	"strings"
)

// execCommand is one entry of a service's ExecStartPreEx property
// (signature a(sasasttttuii)); the timestamps and exit status of its last
// run are not used.
type execCommand struct {
	Path  string
	Argv  []string
	Flags []string // ignore-failure, privileged, no-setuid, ambient, no-env-expand

	StartRealtime, StartMonotonic, ExitRealtime, ExitMonotonic uint64
	PID                                                        uint32
	Code, Status                                               int32
}

// execPrefixes maps ExecStartPreEx flags to the prefixes of systemd.service(5).
var execPrefixes = []struct{ flag, prefix string }{
	{"ignore-failure", "-"},
	{"no-env-expand", ":"},
	{"privileged", "+"},
	{"ambient", "!!"},
	{"no-setuid", "!"},
}

// renderExec writes cmd back as the value of an Exec*= line, so that
// systemd parses it into the same path, argv and flags. Every word is
// double-quoted with C escapes, and "%" is doubled because systemd expands
// specifiers when it loads the drop-in (it already expanded those of the
// original line). "$" is left alone: variables are expanded at exec time,
// from the argv systemd keeps, unless the ":" prefix says not to.
func renderExec(cmd execCommand) (string, error) {
	var b strings.Builder
	for _, f := range cmd.Flags {
		i := slices.IndexFunc(execPrefixes, func(p struct{ flag, prefix string }) bool { return p.flag == f })
		if i < 0 {
			return "", fmt.Errorf("unknown exec flag %q", f)
		}
		b.WriteString(execPrefixes[i].prefix)
	}
	words := cmd.Argv
	if len(words) == 0 || words[0] != cmd.Path {
		b.WriteString("@")
		words = append([]string{cmd.Path}, words...)
	}
	for i, w := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quoteWord(w))
	}
	return b.String(), nil
}

// quoteWord quotes one word for an Exec*= line.
func quoteWord(w string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(w); i++ {
		switch c := w[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '%':
			b.WriteString("%%")
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// sameExec reports whether two commands run the same thing the same way.
func sameExec(a, b execCommand) bool {
	return a.Path == b.Path && slices.Equal(a.Argv, b.Argv) && slices.Equal(sortedFlags(a.Flags), sortedFlags(b.Flags))
}

func sortedFlags(f []string) []string {
	return slices.Sorted(slices.Values(f))
}
