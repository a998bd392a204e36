package securefile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSecFIFOBlocksForever: Read opens the path before it checks
// what it is. A FIFO (a named pipe) blocks open(O_RDONLY) until a writer
// comes, so the daemon (at Load) or `unitlease check` hangs forever on a
// password_file or configuration path where a FIFO was put, instead of
// reporting "not a regular file". Opening a device has effects of its
// own too (/dev/watchdog arms the watchdog, a tape rewinds, a tty can
// become the daemon's controlling terminal) before IsRegular runs.
// Fix: open with O_NONBLOCK|O_NOCTTY (and O_NOFOLLOW, see below), fstat,
// refuse non-regular, then read.
func TestSecFIFOBlocksForever(t *testing.T) {
	p := filepath.Join(t.TempDir(), "password")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Read(p, true)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO read as a file")
		}
	case <-time.After(2 * time.Second):
		// Unblock the reader so the test ends.
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		<-done
		t.Fatal("Read of a FIFO blocked for 2 s (forever without a writer)")
	}
}

// TestSecSymlinkOfAnotherUser: the checks are on the file opened, the
// symlink's target, never on the path that led there. A user who owns the
// directory the configuration names a file in (or a symlink on the way)
// points it at any root-owned file of mode 0600/0644: another service's
// secret becomes unitlease's Redis password (sent in AUTH, over plain TCP
// if the URL is redis://), or any root-owned TOML-looking file the
// configuration. The documented promise, "only root may change the
// file", holds for the inode, not for what the path names.
// Fix: open with O_NOFOLLOW and check each directory on the path (root's,
// not writable by group or others), or openat2(RESOLVE_NO_SYMLINKS).
func TestSecSymlinkOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory another user owns")
	}
	root := t.TempDir()
	secret := filepath.Join(root, "other-service.key")
	if err := os.WriteFile(secret, []byte("another service's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "etc-unitlease")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "redis.password")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if data, err := Read(link, true); err == nil {
		t.Errorf("read %q through a symlink uid 65534 owns, in a directory uid 65534 owns", data)
	}
}

// TestTrustedPaths: the directories and symlinks on a file's path must be
// root's too. A group-writable directory, or a symlink another user owns
// (even in a root directory that others may write with the sticky bit,
// like /tmp), is refused with the path that failed; root's own symlinks,
// relative ones included, and a sticky world-writable directory holding
// root's file are accepted.
func TestTrustedPaths(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files another user owns")
	}
	root := t.TempDir()
	mk := func(p string, mode os.FileMode) string {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
		return p
	}
	file := func(p string) string {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.WriteFile(p, []byte("pw\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(target, p string, uid int) string {
		t.Helper()
		p = filepath.Join(root, p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk("etc", 0o755)
	secret := file("etc/pw")
	mk("loose", 0o775)
	loose := file("loose/pw")
	mk("sticky", os.ModeSticky|0o777)
	inSticky := file("sticky/pw")
	rootLink := link(secret, "sticky/root-link", 0)
	relLink := link("../etc/pw", "etc/../sticky/rel-link", 0)
	otherLink := link(secret, "sticky/other-link", 65534)
	mk("etc/conf.d", 0o755)
	dirLink := link("../../sticky", "etc/conf.d/via", 0)
	viaDir := filepath.Join(dirLink, "other-link")

	for _, c := range []struct {
		path, refused string
	}{
		{secret, ""},
		{inSticky, ""},
		{rootLink, ""},
		{relLink, ""},
		{loose, "directory " + filepath.Join(root, "loose") + " has mode 0775"},
		{otherLink, "symlink " + otherLink + " is owned by uid 65534"},
		{viaDir, "symlink " + filepath.Join(root, "sticky/other-link") + " is owned by uid 65534"},
	} {
		data, err := Read(c.path, true)
		switch {
		case c.refused == "" && (err != nil || string(data) != "pw\n"):
			t.Errorf("%s: %q, %v; want it read", c.path, data, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: %q, %v; want refused: %s", c.path, data, err, c.refused)
		}
	}
}
