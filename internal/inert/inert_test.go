package inert

import (
	"testing"
	"unicode"
)

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"plain \"quoted\" text": "plain \"quoted\" text",
		"a\x1b]0;owned\x07b":    `a\x1b]0;owned\ab`,
		"\u202eevil\u2028":      `\u202eevil\u2028`,
		"\u009b2J":              `\u009b2J`,
		"bad \xff byte":         "bad \ufffd byte",
		"tab\tnewline\n":        `tab\tnewline\n`,
	} {
		got := Text(in)
		if got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
		for _, r := range got {
			if !unicode.IsPrint(r) {
				t.Errorf("Text(%q) holds %q", in, r)
			}
		}
	}
}
