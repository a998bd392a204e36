package unitctl

import (
	"context"
	"fmt"
	"slices"
)

// StartOrder returns units in the order systemd would start them if they
// were started together: a unit comes after every other of them that its
// After= names or whose Before= names it (systemd merges the two); units
// with no ordering between them keep their order in units. Starting them
// one by one in this order honours their ordering, which separate start
// jobs would not (After= orders only jobs queued together).
func (s *Systemd) StartOrder(ctx context.Context, units []string) ([]string, error) {
	if len(units) < 2 {
		return units, nil
	}
	after := map[string][]string{}
	for _, u := range units {
		v, err := s.unitProperty(ctx, u, "After")
		if err != nil {
			return units, fmt.Errorf("unitctl: After= of %s: %w", u, err)
		}
		names, ok := v.Value().([]string)
		if !ok {
			return units, fmt.Errorf("unitctl: After= of %s is %v", u, v)
		}
		after[u] = names
	}
	return orderAfter(units, after), nil
}

// orderAfter orders units so that each comes after those of them it is
// After=; ties and cycles (which systemd would refuse or break) keep the
// order of units.
func orderAfter(units []string, after map[string][]string) []string {
	in := map[string]bool{}
	for _, u := range units {
		in[u] = true
	}
	waits := map[string]int{} // how many of units u is after
	for _, u := range units {
		for _, a := range after[u] {
			if in[a] && a != u {
				waits[u]++
			}
		}
	}
	var out []string
	placed := map[string]bool{}
	for len(out) < len(units) {
		i := slices.IndexFunc(units, func(u string) bool { return !placed[u] && waits[u] == 0 })
		if i < 0 { // a cycle: take the first left, as it comes
			i = slices.IndexFunc(units, func(u string) bool { return !placed[u] })
		}
		u := units[i]
		placed[u] = true
		out = append(out, u)
		for _, v := range units {
			if !placed[v] && slices.Contains(after[v], u) {
				waits[v]--
			}
		}
	}
	return out
}
