package spec

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// LeaseFailover.tla and the Go checker of it (failover*.go) must stay side
// by side, as Lease.tla and actions.go must (tla_test.go): these tests read
// the module and fail when its structure and the Go code part ways.

func failoverActionNames() []string {
	var names []string
	for _, act := range FailoverActions {
		names = append(names, act.Name)
	}
	return names
}

// The variables are declared once, listed in vars in the same order, and
// are the Go state's fields (their JSON names), in that order.
func TestFailoverModuleVariablesAreTheGoState(t *testing.T) {
	defs, variables := readModuleFile(t, "LeaseFailover.tla")
	vars := words(tupleRE.FindStringSubmatch(defs["vars"])[1])
	if !slices.Equal(vars, variables) {
		t.Fatalf("vars = %v, want %v", vars, variables)
	}
	if got := jsonFields(reflect.TypeFor[FailoverState]()); !slices.Equal(got, variables) {
		t.Errorf("FailoverState fields %v, module variables %v", got, variables)
	}
	// The base module too.
	_, base := readModule(t)
	if got := jsonFields(reflect.TypeFor[State]()); !slices.Equal(got, base) {
		t.Errorf("State fields %v, Lease.tla variables %v", got, base)
	}
}

func jsonFields(typ reflect.Type) []string {
	var names []string
	for i := range typ.NumField() {
		names = append(names, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
	}
	return names
}

// Each action's UNCHANGED tuple is exactly the variables it does not prime,
// and each Go action assigns only the variables the module primes.
func TestFailoverModuleUnchangedTuples(t *testing.T) {
	defs, variables := readModuleFile(t, "LeaseFailover.tla")
	for _, act := range FailoverActions {
		body, ok := defs[act.Name]
		if !ok {
			t.Errorf("LeaseFailover.tla has no action %s", act.Name)
			continue
		}
		primed := map[string]bool{}
		for _, m := range primedRE.FindAllStringSubmatch(body, -1) {
			primed[m[1]] = true
		}
		var want []string
		for _, v := range variables {
			if !primed[v] {
				want = append(want, v)
			}
		}
		m := unchangedRE.FindStringSubmatch(body)
		if m == nil {
			t.Errorf("%s has no UNCHANGED tuple", act.Name)
			continue
		}
		if got := words(m[1]); !slices.Equal(got, want) {
			t.Errorf("%s: UNCHANGED %v, want %v", act.Name, got, want)
		}
	}
}

// What each Go action changes, over every reachable state of a small
// instance, is within what the module primes.
func TestFailoverGoActionsChangeOnlyPrimedVariables(t *testing.T) {
	defs, variables := readModuleFile(t, "LeaseFailover.tla")
	f := Failover{4, 2, 1, true, 1, 1, 1, 1, 2}
	m := f.module()
	g, _, err := explore(m, nil)
	if err != nil {
		t.Fatal(err)
	}
	for a, act := range FailoverActions {
		primed := map[string]bool{}
		for _, m := range primedRE.FindAllStringSubmatch(defs[act.Name], -1) {
			primed[m[1]] = true
		}
		taken := false
		for _, s := range g.states {
			m.next[a](s, func(n FailoverState) {
				taken = true
				before, after := reflect.ValueOf(s), reflect.ValueOf(n)
				for i, v := range variables {
					if !primed[v] && !before.Field(i).Equal(after.Field(i)) {
						t.Errorf("%s changes %s, which the module leaves UNCHANGED: %v -> %v", act.Name, v, s, n)
					}
				}
			})
		}
		if !taken {
			t.Errorf("%s is never taken in %+v", act.Name, f)
		}
	}
}

// Next and Spec's fairness list the Go actions, in order.
func TestFailoverModuleNextAndFairnessMatchActions(t *testing.T) {
	defs, _ := readModuleFile(t, "LeaseFailover.tla")
	names := failoverActionNames()
	var next []string
	for _, line := range strings.Split(defs["Next"], "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == `\/` {
			next = append(next, f[1])
		}
	}
	if !slices.Equal(next, names) {
		t.Errorf("Next = %v, want %v", next, names)
	}
	var fair []string
	for _, m := range regexp.MustCompile(`WF_vars\((\w+)\)`).FindAllStringSubmatch(defs["Spec"], -1) {
		fair = append(fair, m[1])
	}
	if !slices.Equal(fair, names) {
		t.Errorf("weakly fair actions = %v, want %v", fair, names)
	}
}

// The module's constants are the Go instance's first fields; its own
// timings are the Go seed's, and its derived bounds are the Go methods'.
func TestFailoverModuleConstantsAndDefinitions(t *testing.T) {
	defs, _ := readModuleFile(t, "LeaseFailover.tla")
	src, err := os.ReadFile("LeaseFailover.tla")
	if err != nil {
		t.Fatal(err)
	}
	decl := regexp.MustCompile(`(?m)^CONSTANTS (.*)$`).FindStringSubmatch(string(src))
	typ := reflect.TypeFor[Failover]()
	var fields []string
	for i := range 4 {
		fields = append(fields, typ.Field(i).Name)
	}
	if got := words(decl[1]); !slices.Equal(got, fields) {
		t.Errorf("CONSTANTS %v, Go Failover starts with %v", got, fields)
	}
	for name, want := range map[string]int{"Retry": SeedRetry, "Renew": SeedRenew, "StopWait": SeedStopWait, "PollLow": SeedPollLow, "PollHigh": SeedPollHigh, "None": None} {
		if got := strings.TrimSpace(defs[name]); got != strconv.Itoa(want) {
			t.Errorf("%s == %q in LeaseFailover.tla, Go has %d", name, got, want)
		}
	}
	// The definitions the Go methods implement, as the module writes them.
	for name, want := range map[string]string{
		"CutMax": "Retry + PollHigh",
		"Settle": "IF MaxLag + 1 > Detect THEN MaxLag + 1 ELSE Detect",
		"MaxTop": `3 + CutMax \div Retry`,
	} {
		if got := strings.TrimSpace(strings.SplitN(defs[name], "\n", 2)[0]); got != want {
			t.Errorf("%s == %q in LeaseFailover.tla, the Go checker implements %q", name, got, want)
		}
	}
	f := SeedFailover(36, 10, 10, true)
	if f.CutMax() != SeedRetry+SeedPollHigh || f.Settle() != 11 || f.MaxTop() != 3+f.CutMax()/SeedRetry {
		t.Errorf("CutMax %d Settle %d MaxTop %d", f.CutMax(), f.Settle(), f.MaxTop())
	}
}

// LeaseFailover.cfg names the module's constants with the values the
// command and make check-spec use as the seed.
func TestFailoverConfig(t *testing.T) {
	src, err := os.ReadFile("LeaseFailover.cfg")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(\w+) = (\w+)$`).FindAllStringSubmatch(string(src), -1) {
		got[m[1]] = m[2]
	}
	f := SeedFailover(36, 10, 10, true)
	want := map[string]string{
		"LeaseSpan": strconv.Itoa(f.LeaseSpan), "MaxLag": strconv.Itoa(f.MaxLag),
		"Detect": strconv.Itoa(f.Detect), "Rule": "TRUE",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("LeaseFailover.cfg constants %v, want %v", got, want)
	}
	for _, line := range []string{"SPECIFICATION Spec", "TypeOK", "ProcessExclusion", "Handoff"} {
		if !strings.Contains(string(src), line) {
			t.Errorf("LeaseFailover.cfg does not name %s", line)
		}
	}
}
