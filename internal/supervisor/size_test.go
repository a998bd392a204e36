package supervisor

import (
	"testing"
	"unsafe"

	"github.com/unitlease/unitlease/policy"
)

// TestALeaseFitsItsSizeClasses: a daemon keeps a Supervisor and its last
// snapshot for every lease, and makes a snapshot at every step. The
// runtime rounds each allocation up to a size class (…, 640, 704, 768,
// 896 bytes; …, 112, 128, 144 bytes), and an object of more than 512
// bytes that holds pointers takes 8 bytes more for its header: a field
// more can cost 128 bytes a lease. At 5,000 leases the Supervisor in the
// 896 class was 0.64 MB more than in the 768 (which holds 760 bytes and
// the header), and the snapshot at 192 (a Status) 0.32 MB more than at
// 128. A change that outgrows a class fails here, to be weighed.
func TestALeaseFitsItsSizeClasses(t *testing.T) {
	for _, c := range []struct {
		what      string
		size, max uintptr
	}{
		{"Supervisor", unsafe.Sizeof(Supervisor{}), 768 - 8},
		{"snapshot", unsafe.Sizeof(snapshot{}), 128},
		{"policy.Machine (in the Supervisor)", unsafe.Sizeof(policy.Machine{}), 424},
	} {
		if c.size > c.max {
			t.Errorf("%s is %d bytes, over the %d it fits in", c.what, c.size, c.max)
		}
	}
}
