package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParse: any document either parses into a configuration whose timing
// is valid and whose Redis settings the store accepts the form of, or is
// refused with an error that names the file (and a line of it, when it
// names one), without a panic.
func FuzzParse(f *testing.F) {
	f.Add("node = \"a\"\n[redis]\nurl = \"redis://u@h:1/2\"\n[timing]\nretry = \"1s\"\n")
	f.Add("[redis]\nsentinels = [\"h:1\", \"h:2\"]\nmaster_name = \"m\"\ndb = 3\n")
	f.Add("[timing]\nlease_span = \"1h\"\nstop_wait = \"59m\"\n")
	f.Add("node = \n[[x]]\n")
	f.Fuzz(func(t *testing.T, doc string) {
		c, err := Parse("u.toml", []byte(doc))
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrConfig) || e.File != "u.toml" {
				t.Fatalf("%q: %v is not a config error naming the file", doc, err)
			}
			if e.Line > strings.Count(doc, "\n")+1 {
				t.Fatalf("%q: line %d is past the document's end", doc, e.Line)
			}
			return
		}
		if _, err := c.Timing.Resolved(); err != nil || c.Timing.LeaseSpan == 0 {
			t.Fatalf("%q: accepted a timing that does not resolve: %+v %v", doc, c.Timing, err)
		}
		if c.Redis.URL == "" && len(c.Redis.Sentinels) == 0 {
			t.Fatalf("%q: accepted with no Redis at all", doc)
		}
	})
}
