package unitctl

import "testing"

func TestSystemdMajor(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		ok   bool
		fits bool
	}{
		{`"252.39-1~deb12u1"`, 252, true, true},
		{`"247"`, 247, true, true},
		{`"246.6-1ubuntu1"`, 246, true, false},
		{`"245"`, 245, true, false},
		{`"v255"`, 0, false, true},
		{`""`, 0, false, true},
	} {
		n, ok := systemdMajor(c.in)
		if n != c.n || ok != c.ok {
			t.Errorf("systemdMajor(%s) = %d, %t; want %d, %t", c.in, n, ok, c.n, c.ok)
		}
		if fits := !ok || n >= MinSystemd; fits != c.fits {
			t.Errorf("%s: accepted %t, want %t", c.in, fits, c.fits)
		}
	}
}
