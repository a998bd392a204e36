package daemon

import (
	"slices"
	"testing"
)

// TestReconcile: which leases a reload removes (hands off, releases,
// unmanages) and which it adds, given the running set and what discovery
// found.
func TestReconcile(t *testing.T) {
	for _, c := range []struct {
		name           string
		current, found map[string][]string
		remove, add    []string
	}{
		{"nothing", nil, nil, nil, nil},
		{"first discovery", nil, map[string][]string{"db": {"db.service"}, "vpn": {"vpn.service"}}, nil, []string{"db", "vpn"}},
		{"unchanged", map[string][]string{"db": {"db.service"}}, map[string][]string{"db": {"db.service"}}, nil, nil},
		{"annotation removed", map[string][]string{"db": {"db.service"}, "vpn": {"vpn.service"}}, map[string][]string{"vpn": {"vpn.service"}}, []string{"db"}, nil},
		{"unit joins a group", map[string][]string{"db": {"a.service"}}, map[string][]string{"db": {"a.service", "b.service"}}, []string{"db"}, []string{"db"}},
		{"unit leaves a group", map[string][]string{"db": {"a.service", "b.service"}}, map[string][]string{"db": {"a.service"}}, []string{"db"}, []string{"db"}},
		{"unit moves to another lease", map[string][]string{"old": {"a.service"}}, map[string][]string{"new": {"a.service"}}, []string{"old"}, []string{"new"}},
		{"everything gone", map[string][]string{"a": {"a.service"}, "b": {"b.service"}}, map[string][]string{}, []string{"a", "b"}, nil},
	} {
		remove, add := reconcile(c.current, c.found)
		if !slices.Equal(remove, c.remove) || !slices.Equal(add, c.add) {
			t.Errorf("%s: remove %v, add %v; want %v, %v", c.name, remove, add, c.remove, c.add)
		}
	}
}
