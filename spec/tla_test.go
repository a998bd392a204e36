package spec

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The Go actions and Lease.tla must stay side by side: these tests read the
// module and fail when its structure and the Go code part ways.

var (
	defRE       = regexp.MustCompile(`(?m)^(\w+) ==`)
	primedRE    = regexp.MustCompile(`(\w+)'`)
	unchangedRE = regexp.MustCompile(`UNCHANGED <<([^>]*)>>`)
	tupleRE     = regexp.MustCompile(`<<([^>]*)>>`)
	commentRE   = regexp.MustCompile(`\\\*.*`)
)

func readModule(t *testing.T) (defs map[string]string, variables []string) {
	t.Helper()
	return readModuleFile(t, "Lease.tla")
}

// readModuleFile returns a module's definitions (name to body, for those
// that start a line as `Name ==`) and its declared variables, in order.
func readModuleFile(t *testing.T, file string) (defs map[string]string, variables []string) {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Comments say what the definitions mean; only the definitions count
	// (a comment's "standby's" is no primed variable).
	text := commentRE.ReplaceAllString(string(src), "")
	decl := text[strings.Index(text, "VARIABLES")+len("VARIABLES") : strings.Index(text, "vars ==")]
	variables = words(decl)
	defs = map[string]string{}
	locs := defRE.FindAllStringSubmatchIndex(text, -1)
	for i, loc := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		defs[text[loc[2]:loc[3]]] = text[loc[1]:end]
	}
	return defs, variables
}

func words(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		out = append(out, strings.TrimSpace(w))
	}
	return out
}

func TestModuleVarsIsEveryVariable(t *testing.T) {
	defs, variables := readModule(t)
	if len(variables) != 12 {
		t.Fatalf("VARIABLES declares %d, want 12: %v", len(variables), variables)
	}
	vars := words(tupleRE.FindStringSubmatch(defs["vars"])[1])
	if !slices.Equal(vars, variables) {
		t.Fatalf("vars = %v, want %v", vars, variables)
	}
}

// Each action's UNCHANGED tuple is exactly the variables it does not prime.
func TestModuleUnchangedTuples(t *testing.T) {
	defs, variables := readModule(t)
	for _, act := range Actions {
		body, ok := defs[act.Name]
		if !ok {
			t.Errorf("Lease.tla has no action %s", act.Name)
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

// Next and Spec's fairness list the Go actions, in order.
func TestModuleNextAndFairnessMatchActions(t *testing.T) {
	defs, _ := readModule(t)
	var names []string
	for _, act := range Actions {
		names = append(names, act.Name)
	}
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

// The module's own timings are the Go seed's.
func TestModuleTimingsAreTheSeed(t *testing.T) {
	defs, _ := readModule(t)
	for name, want := range map[string]int{"Retry": SeedRetry, "Renew": SeedRenew, "StopWait": SeedStopWait, "PollLow": SeedPollLow, "PollHigh": SeedPollHigh} {
		if got := strings.TrimSpace(defs[name]); got != strconv.Itoa(want) {
			t.Errorf("%s == %q in Lease.tla, Go seed has %d", name, got, want)
		}
	}
}
