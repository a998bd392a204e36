package securefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		mode   os.FileMode
		secret bool
		want   string // "" for accepted
	}{
		{0o600, true, ""},
		{0o400, true, ""},
		{0o640, true, "mode 0640 lets group or others read or change it"},
		{0o602, true, "mode 0602 lets group or others read or change it"},
		{0o620, true, "mode 0620 lets group or others read or change it"},
		{0o644, false, ""},
		{0o640, false, ""},
		{0o664, false, "mode 0664 lets group or others change it"},
		{0o646, false, "mode 0646 lets group or others change it"},
	} {
		p := write("f", c.mode)
		_, err := Read(p, c.secret)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("mode %04o secret %t: %v, want %q", c.mode, c.secret, err, c.want)
		}
	}
	if os.Geteuid() == 0 {
		p := write("other", 0o600)
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(p, true); err == nil || !strings.Contains(err.Error(), "owned by uid 65534, not root") {
			t.Errorf("a file owned by another user: %v", err)
		}
	}
	if _, err := Read(dir, false); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: %v", err)
	}
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(big, true); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a large file: %v", err)
	}
}
