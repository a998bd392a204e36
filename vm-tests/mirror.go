//go:build linux

package vmtests

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// fallbackMirror is used when the host's apt sources name no mirror for
// Suite.
const fallbackMirror = "http://deb.debian.org/debian"

// mirror picks the Debian mirror for debootstrap: the option, then
// $UNITLEASE_VM_MIRROR, then the first "deb" source of the host's apt that
// serves Suite (the only Debian host that this machine reaches).
func (o RootfsOptions) mirror() string {
	if o.Mirror != "" {
		return o.Mirror
	}
	if m := os.Getenv("UNITLEASE_VM_MIRROR"); m != "" {
		return m
	}
	for _, src := range hostAptSources() {
		if src.serves("deb", Suite) {
			return src.uris[0]
		}
	}
	return fallbackMirror
}

type aptSource struct {
	types, uris, suites []string
	enabled             bool
}

func (s aptSource) serves(typ, suite string) bool {
	return s.enabled && len(s.uris) > 0 && contains(s.types, typ) && contains(s.suites, suite)
}

func contains(list []string, want string) bool {
	for _, v := range list {
		if v == want {
			return true
		}
	}
	return false
}

// hostAptSources reads the host's sources in apt's order: sources.list,
// then sources.list.d/*.list and *.sources by name.
func hostAptSources() []aptSource {
	out := parseOneLineSources(readText("/etc/apt/sources.list"))
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	sort.Strings(files)
	for _, f := range files {
		switch {
		case strings.HasSuffix(f, ".list"):
			out = append(out, parseOneLineSources(readText(f))...)
		case strings.HasSuffix(f, ".sources"):
			out = append(out, parseDeb822Sources(readText(f))...)
		}
	}
	return out
}

func readText(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// parseOneLineSources parses "deb [options] URI SUITE COMPONENT..." lines.
func parseOneLineSources(text string) []aptSource {
	var out []aptSource
	for _, line := range strings.Split(text, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		typ, rest := f[0], f[1:]
		if strings.HasPrefix(rest[0], "[") {
			for len(rest) > 0 && !strings.HasSuffix(rest[0], "]") {
				rest = rest[1:]
			}
			if len(rest) > 0 {
				rest = rest[1:]
			}
		}
		if len(rest) < 2 {
			continue
		}
		out = append(out, aptSource{types: []string{typ}, uris: rest[:1], suites: rest[1:2], enabled: true})
	}
	return out
}

// parseDeb822Sources parses the paragraphs of a .sources file.
func parseDeb822Sources(text string) []aptSource {
	var out []aptSource
	for _, para := range deb822Paragraphs(text) {
		out = append(out, aptSource{
			types:   strings.Fields(para["types"]),
			uris:    strings.Fields(para["uris"]),
			suites:  strings.Fields(para["suites"]),
			enabled: !strings.EqualFold(strings.TrimSpace(para["enabled"]), "no"),
		})
	}
	return out
}

// deb822Paragraphs splits text into paragraphs of lower-cased keys; a
// continuation line (starting with white space) extends the last key.
func deb822Paragraphs(text string) []map[string]string {
	var out []map[string]string
	cur, last := map[string]string{}, ""
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "#"):
		case strings.TrimSpace(line) == "":
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur, last = map[string]string{}, ""
		case line[0] == ' ' || line[0] == '\t':
			if last != "" {
				cur[last] += " " + strings.TrimSpace(line)
			}
		default:
			k, v, _ := strings.Cut(line, ":")
			last = strings.ToLower(strings.TrimSpace(k))
			cur[last] = strings.TrimSpace(v)
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}
