package config

import (
	"strings"
	"testing"
)

// TestProfileOfTheWrongTypeSaysWhatItTakes: commit bfc967b adds
// `[timing] profile`, a name, to the [timing] table, whose keys d943ec7
// describes on a type error as taking "a duration string such as \"5s\""
// (wanted: every timing.* string is a duration). So `profile = 1` or
// `profile = true` is answered with 'want a duration string such as "5s"':
// an operator told to write profile = "5s" then gets '"5s" is not a
// profile'. Nothing unsafe gets through (both are refused), but the
// message points the wrong way on the key meant for first-hour users.
//
// Suggested fix: in wanted, special-case timing.profile ("a profile name
// in quotes: default or quick"), or match the duration wording on the
// duration keys only.
// TestProfileOfTheWrongTypeSaysWhatItTakes: profile = 1 names the
// profiles, not a duration.
func TestProfileOfTheWrongTypeSaysWhatItTakes(t *testing.T) {
	for _, doc := range []string{"[timing]\nprofile = 1\n", "[timing]\nprofile = true\n"} {
		_, err := Parse("u.toml", []byte("node = \"n1\"\n"+doc))
		if err == nil {
			t.Fatalf("%q accepted", doc)
		}
		if strings.Contains(err.Error(), "duration") || !strings.Contains(err.Error(), "quick") {
			t.Errorf("%q: %v (want the profile names, not a duration)", doc, err)
		}
	}
}
