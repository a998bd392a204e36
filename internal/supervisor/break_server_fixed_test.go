package supervisor

import (
	"testing"

	"github.com/unitlease/unitlease/internal/redistest"
)

// TestBreakLiveRestoreUnderALeader: the same rollback without a restart
// (a backup tool writing the saved values back into the running Redis:
// same run id, same replication id). The standby sees node-0's released
// record replace the leader's under one server, "witnessed", takes it at
// once and starts web.service while the leader runs it until its next
// renewal. Before this commit the version below the standby's floor was
// garbage there, and nothing was acquired.
// Closed: a version below the highest one a node saw is an older state,
// whose release is not witnessed (policy: Machine.see).
func TestBreakLiveRestoreUnderALeader(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{AppendOnly: true})
	rollbackUnderALeader(t, srv, func(lease, unit string) {
		srv.Command("SET", "unitlease:lease:L", lease)
		srv.Command("SET", "unitlease:unit:web.service", unit)
	})
}
