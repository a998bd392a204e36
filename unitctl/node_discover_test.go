package unitctl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const plainService = "[Service]\nExecStart=/bin/sleep infinity\n"

// TestNodeDiscover: annotations are found in fragments and drop-ins, in
// /etc and /run, on template instances, through aliases once; a malformed
// one is reported with its file and line and leaves only its own unit out.
func TestNodeDiscover(t *testing.T) {
	t.Parallel()
	s := dialNode(t, Options{})
	bad := unitDir + "/ul-disc-bad.service.d/20-lease.conf"
	installUnits(t, map[string]string{
		"ul-disc-a.service":                     plainService + "\n[X-UnitLease]\nLease=alpha\n",
		"ul-disc-b.service":                     plainService,
		"ul-disc-b.service.d/lease.conf":        "[X-UnitLease]\n",
		"ul-disc-c.service":                     plainService + "[X-UnitLease]\nLease=one\n",
		"ul-disc-c.service.d/10-x.conf":         "[Service]\nNice=1\n",
		"ul-disc-c.service.d/20-y.conf":         "[X-UnitLease]\nLease=two\n",
		"ul-disc-bad.service":                   plainService,
		bad:                                     "[X-UnitLease]\nLease=ok\nTimeout=5s\n",
		"ul-disc-t@.service":                    plainService + "[X-UnitLease]\nLease=t-%i\n",
		"/run/systemd/system/ul-disc-r.service": plainService + "[X-UnitLease]\nLease=runtime\n",
		"ul-disc-none.service":                  plainService,
	})
	if err := os.Symlink(filepath.Join(unitDir, "ul-disc-a.service"), filepath.Join(unitDir, "ul-disc-alias.service")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(unitDir, "ul-disc-alias.service")) })
	systemctl(t, "daemon-reload")
	systemctl(t, "start", "ul-disc-t@loaded.service") // a loaded instance is found by itself

	found, errs := s.Discover(ctxFor(t, 30*time.Second), "ul-disc-t@named.service")
	got := map[string]string{}
	for _, a := range found {
		if strings.HasPrefix(a.Unit, "ul-disc-") {
			got[a.Unit] = fmt.Sprintf("%s %s:%d", a.Lease, a.File, a.Line)
		}
	}
	want := map[string]string{
		"ul-disc-a.service":        "alpha " + unitDir + "/ul-disc-a.service:5",
		"ul-disc-b.service":        "ul-disc-b.service " + unitDir + "/ul-disc-b.service.d/lease.conf:1",
		"ul-disc-c.service":        "two " + unitDir + "/ul-disc-c.service.d/20-y.conf:2",
		"ul-disc-t@loaded.service": "t-loaded " + unitDir + "/ul-disc-t@.service:4",
		"ul-disc-t@named.service":  "t-named " + unitDir + "/ul-disc-t@.service:4",
		"ul-disc-r.service":        "runtime /run/systemd/system/ul-disc-r.service:4",
	}
	for u, w := range want {
		if got[u] != w {
			t.Errorf("%s: got %q, want %q", u, got[u], w)
		}
	}
	for u := range got {
		if _, ok := want[u]; !ok {
			t.Errorf("unexpected annotation of %s: %s", u, got[u])
		}
	}
	var ae *AnnotationError
	for _, err := range errs {
		switch {
		case errors.As(err, &ae) && ae.Unit == "ul-disc-bad.service":
		case strings.Contains(err.Error(), "ul-disc-"):
			t.Errorf("unexpected error: %v", err)
		}
	}
	if ae == nil || ae.File != bad || ae.Line != 3 || ae.Key != "Timeout" {
		t.Fatalf("errors %v: want one naming %s:3 key Timeout", errs, bad)
	}
	t.Logf("reported: %v", ae)
}

// TestNodeDiscoverManyUnits: discovery among a thousand services costs
// about one property read per unit.
func TestNodeDiscoverManyUnits(t *testing.T) {
	s := dialNode(t, Options{})
	files := map[string]string{
		"ul-many-marked.service":              plainService + "[X-UnitLease]\n",
		"ul-many-dropin.service":              plainService,
		"ul-many-dropin.service.d/lease.conf": "[X-UnitLease]\nLease=many\n",
	}
	for i := range 1000 {
		files[fmt.Sprintf("ul-many-%04d.service", i)] = plainService
	}
	writeUnitFiles(t, files) // none is started: no stop on cleanup
	systemctl(t, "daemon-reload")
	start := time.Now()
	found, errs := s.Discover(ctxFor(t, time.Minute))
	took := time.Since(start)
	if len(errs) > 0 {
		t.Errorf("errors: %v", errs)
	}
	var units []string
	for _, a := range found {
		if strings.HasPrefix(a.Unit, "ul-many-") {
			units = append(units, a.Unit+"="+a.Lease)
		}
	}
	if !slices.Equal(units, []string{"ul-many-dropin.service=many", "ul-many-marked.service=ul-many-marked.service"}) {
		t.Errorf("found %v", units)
	}
	t.Logf("Discover over %d+ services took %v", len(files)-1, took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("Discover took %v", took)
	}
}
