package unitctl

import (
	"slices"
	"testing"
)

func TestOrderAfter(t *testing.T) {
	for _, c := range []struct {
		name  string
		units []string
		after map[string][]string
		want  []string
	}{
		{"no ordering keeps the given order", []string{"a", "b", "c"}, nil, []string{"a", "b", "c"}},
		{"a after b", []string{"a", "b"}, map[string][]string{"a": {"b", "basic.target"}}, []string{"b", "a"}},
		{"a chain", []string{"a", "b", "c"}, map[string][]string{"a": {"b"}, "b": {"c"}}, []string{"c", "b", "a"}},
		{"outside units are ignored", []string{"a", "b"}, map[string][]string{"a": {"x"}, "b": {"y"}}, []string{"a", "b"}},
		{"a cycle keeps the given order", []string{"a", "b", "c"}, map[string][]string{"a": {"b"}, "b": {"a"}}, []string{"c", "a", "b"}},
	} {
		if got := orderAfter(c.units, c.after); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
