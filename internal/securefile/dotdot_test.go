package securefile

import (
	"os"
	"path/filepath"
	"testing"
)

// TestDotDotAfterASymlinkIsResolvedAsTheKernelDoes: a ".." after a
// symlink goes up from the symlink's target, as the kernel resolves it.
// The walk once took it lexically (dropping the symlink): with a root
// symlink "current" into a directory another user owns,
// app/current/../shared/pw was checked as app/shared/pw while the kernel
// opened that user's shared/pw, a symlink to another service's secret.
func TestDotDotAfterASymlinkIsResolvedAsTheKernelDoes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make files another user owns")
	}
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// Another service's secret, root's, in root's directory.
	secret := filepath.Join(root, "other-service.key")
	must(os.WriteFile(secret, []byte("another service's secret\n"), 0o600))
	// The expected file, root's: what the walk believes is read.
	app := filepath.Join(root, "app")
	must(os.MkdirAll(filepath.Join(app, "shared"), 0o755))
	must(os.WriteFile(filepath.Join(app, "shared", "pw"), []byte("pw\n"), 0o600))
	// uid 65534's tree, and root's symlink into it.
	home := filepath.Join(root, "home")
	must(os.MkdirAll(filepath.Join(home, "release", "shared"), 0o755))
	must(os.MkdirAll(filepath.Join(home, "shared"), 0o755))
	for _, d := range []string{home, filepath.Join(home, "release"), filepath.Join(home, "shared")} {
		must(os.Chown(d, 65534, 65534))
	}
	must(os.Symlink(filepath.Join(home, "release"), filepath.Join(app, "current"))) // root's
	evil := filepath.Join(home, "shared", "pw")
	must(os.Symlink(secret, evil))
	must(os.Lchown(evil, 65534, 65534))

	// A root symlink whose relative target has the ".." after a symlink.
	conf := filepath.Join(root, "etc")
	must(os.Mkdir(conf, 0o755))
	viaTarget := filepath.Join(conf, "redis.password")
	must(os.Symlink("../app/current/../shared/pw", viaTarget))

	for _, p := range []string{app + "/current/../shared/pw", viaTarget} {
		data, err := Read(p, true)
		if err == nil {
			t.Errorf("Read(%s) = %q: read through uid 65534's symlink %s (the walk checked %s instead)", p, data, evil, filepath.Join(app, "shared", "pw"))
		}
	}
}
