package daemon

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestReloadReverifiesAndAnUnsafeUnitIsHandedOff: a reload validates the
// units it already manages again. A unit whose protections were defeated
// (an override that sets KillMode=process, say) is a config_error, and
// the node that runs it hands the lease off and takes it no more, while
// it stays unsafe; once a reload finds it sound again, the node may take
// the lease again.
func TestReloadReverifiesAndAnUnsafeUnitIsHandedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sd, store, d, logs, ctx, _ := lead(t)
		sd.set(func(f *fakeSystemd) { f.refused["db.service"] = true })
		d.Reload(ctx)
		time.Sleep(10 * time.Minute) // long past any backoff
		synctest.Wait()
		if sd.isActive("db.service") || !store.record("db").Released {
			t.Fatalf("an unsafe unit still runs, or its lease is held (%v):\n%s", store.record("db"), logs)
		}
		if !strings.Contains(logs.String(), "UNITLEASE_EVENT=config_error") || !strings.Contains(logs.String(), "KillMode=process") {
			t.Fatalf("no config_error naming what is wrong:\n%s", logs)
		}
		sd.set(func(f *fakeSystemd) { f.refused["db.service"] = false })
		d.Reload(ctx)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if !sd.isActive("db.service") || store.record("db").Holder != "node-a" || store.record("db").Released {
			t.Fatalf("sound again, the unit did not run here again (%v):\n%s", store.record("db"), logs)
		}
	})
}
