// Package inert makes text from outside (Redis values and key names,
// server replies, unit names) safe to print on a terminal or to write to
// the journal: every character that is not printable becomes an escape.
package inert

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Text is s with every non-printable character written as its Go escape
// (\x1b, \u202e, \u2028, ...) and every byte that is not UTF-8 as
// U+FFFD. Printable text, quotes included, is left as it is, so a message
// reads the same; nothing in the result can move the cursor, retitle or
// clear a terminal, or reverse the text around it.
func Text(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\ufffd")
	}
	clean := true
	for _, r := range s {
		if !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsPrint(r) {
			b.WriteRune(r)
		} else {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}
