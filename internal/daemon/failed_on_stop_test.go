package daemon

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/unitlease/unitlease/unitctl"
)

// TestFailedUnitDuringCleanDaemonStopIsNoUnitFailure: a unit whose main
// process exits non-zero on SIGTERM (a JVM's 143, a shell wrapper's 1)
// ends the stop systemd propagates from `systemctl stop unitlease` as
// failed, not inactive: it is the same planned stop, handed off as such,
// not unit_failed.
func TestFailedUnitDuringCleanDaemonStopIsNoUnitFailure(t *testing.T) {
	for _, job := range []string{"stop", "restart"} {
		t.Run("job "+job, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sd, _, logs, _, stop := leading(t)
				defer stop()
				sd.set(func(f *fakeSystemd) {
					f.jobs["unitlease.service"] = job
					f.active["web.service"] = false
				})
				// systemd stopped the bound unit for the daemon's stop job;
				// its main process exited 143 on SIGTERM: ActiveState=failed.
				sd.events <- unitctl.Event{Unit: "web.service", Kind: unitctl.Failed,
					State: unitctl.UnitState{ActiveState: "failed", SubState: "failed"}}
				time.Sleep(time.Second)
				synctest.Wait()
				out := logs.String()
				if strings.Contains(out, "UNITLEASE_EVENT=unit_failed") {
					t.Errorf("a unit stopped by systemd for unitlease.service's %s job (and failing its stop) is logged unit_failed:\n%s", job, out)
				}
			})
		})
	}
}
