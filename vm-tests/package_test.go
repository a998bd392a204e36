//go:build linux

package vmtests

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/redistest"
	"github.com/unitlease/unitlease/policy"
)

// The packages' tests (nfpm.yaml, packaging/). TestPackage: `make package`
// gives the same bytes twice; lintian and rpmlint pass; the .rpm holds the
// .deb's files; both install, upgrade and go away in a chroot without
// systemd; the .deb installs, runs, upgrades keeping an edited
// configuration, is removed and purged on node 0 of the package's cluster.
// TestPackageConfigIsTheDefaults: the shipped configuration.

// pkgBuilds are the packages TestPackage checks: two builds of the version
// `make` derives from git, and one of a higher version for the upgrade.
type pkgBuilds struct {
	version, upgrade string
	deb, rpm         string // version
	deb2, rpm2       string // the same again, built from scratch
	upDeb, upRPM     string // upgrade
}

// TestPackage builds the packages with `make package` and checks them.
// The subtests run one after another: the node test runs the daemon on the
// tests' fast timing, which lintian's CPU load next to it could upset.
func TestPackage(t *testing.T) {
	p := pkgBuild(t)
	t.Run("Reproducible", func(t *testing.T) { testPackageReproducible(t, p) })
	t.Run("Lint", func(t *testing.T) { testPackageLint(t, p) })
	t.Run("FileLists", func(t *testing.T) { testPackageFileLists(t, p) })
	t.Run("InChroot", func(t *testing.T) { testPackageInChroot(t, p) })
	t.Run("InstallUpgradeRemovePurge", func(t *testing.T) { testPackageInstallUpgradeRemovePurge(t, p) })
}

func pkgBuild(t *testing.T) *pkgBuilds {
	t.Helper()
	ctx, dir := t.Context(), t.TempDir()
	version, err := pkgMake(ctx, "-s", "package-version")
	if err != nil {
		t.Fatal(err)
	}
	// Any version followed by ".1" sorts above it in dpkg and rpm.
	p := &pkgBuilds{version: version, upgrade: version + ".1"}
	start := time.Now()
	if p.deb, p.rpm, err = pkgMakePackage(ctx, filepath.Join(dir, "a"), p.version); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	var wg sync.WaitGroup
	var errAgain, errUp error
	wg.Go(func() { p.deb2, p.rpm2, errAgain = pkgMakePackage(ctx, filepath.Join(dir, "b"), p.version) })
	wg.Go(func() { p.upDeb, p.upRPM, errUp = pkgMakePackage(ctx, filepath.Join(dir, "c"), p.upgrade) })
	wg.Wait()
	if err := pkgFirstErr(errAgain, errUp); err != nil {
		t.Fatal(err)
	}
	t.Logf("make package: %s in %v; then %s again and %s, side by side, in %v",
		p.version, first.Round(time.Millisecond), p.version, p.upgrade, (time.Since(start) - first).Round(time.Millisecond))
	return p
}

func pkgFirstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// pkgMakePackage runs `make package` into dir and returns the two files,
// checking their names against the contract.
func pkgMakePackage(ctx context.Context, dir, version string) (deb, rpm string, err error) {
	if _, err := pkgMake(ctx, "-s", "package", "DIST="+dir, "VERSION="+version); err != nil {
		return "", "", err
	}
	deb = filepath.Join(dir, fmt.Sprintf("unitlease_%s_%s.deb", version, runtime.GOARCH))
	rpm = filepath.Join(dir, fmt.Sprintf("unitlease-%s.%s.rpm", version, pkgRPMArch()))
	for _, f := range []string{deb, rpm} {
		if _, err := os.Stat(f); err != nil {
			names, _ := filepath.Glob(filepath.Join(dir, "*"))
			return "", "", fmt.Errorf("make package: %w; the directory holds %v", err, names)
		}
	}
	return deb, rpm, nil
}

func pkgRPMArch() string {
	switch runtime.GOARCH {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return runtime.GOARCH
}

// pkgMake runs make in the repository's root and returns its output
// without the trailing newline. The make that may be running `go test`
// does not pass its flags down. TMPDIR is a directory of the test's:
// lintian leaves a file behind in it on every run.
func pkgMake(ctx context.Context, args ...string) (string, error) {
	tmp, err := os.MkdirTemp("", "ul-pkg-make-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	return Make(ctx, "..", []string{"TMPDIR=" + tmp}, args...)
}

// pkgHost runs a host command and returns its combined output.
func pkgHost(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), pkgHostTool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// pkgHostStdout runs a host command and returns its standard output.
func pkgHostStdout(t *testing.T, name string, args ...string) string {
	t.Helper()
	var errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), pkgHostTool(t, name), args...)
	cmd.Stderr = &errOut
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errOut.Bytes())
	}
	return string(out)
}

func pkgHostTool(t *testing.T, name string) string {
	t.Helper()
	path, err := lookTool(name)
	if err != nil {
		t.Fatalf("%v (.ci/run installs what the package tests need)", err)
	}
	return path
}

func testPackageReproducible(t *testing.T, p *pkgBuilds) {
	for _, pair := range [][2]string{{p.deb, p.deb2}, {p.rpm, p.rpm2}} {
		a, errA := os.ReadFile(pair[0])
		b, errB := os.ReadFile(pair[1])
		if err := pkgFirstErr(errA, errB); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("two builds of %s differ: %s and %s", filepath.Base(pair[0]), pair[0], pair[1])
		}
		t.Logf("%s: %d bytes, the same twice", filepath.Base(pair[0]), len(a))
	}
	// gzip -n: no name and no time in the man pages' headers.
	files := pkgDebFiles(t, p.deb)
	for _, page := range []string{"/usr/share/man/man8/unitlease.8.gz", "/usr/share/man/man5/unitlease.toml.5.gz"} {
		gz := files[page].data
		if len(gz) < 10 || gz[3]&0x08 != 0 || !bytes.Equal(gz[4:8], []byte{0, 0, 0, 0}) {
			t.Errorf("%s: gzip header % x carries a name or a time", page, gz[:min(len(gz), 10)])
		}
	}
}

func testPackageLint(t *testing.T, p *pkgBuilds) {
	// rpmlint unpacks the payload with cpio; nfpm writes absolute paths.
	// The Makefile's wrapper must keep them out of the host's /.
	const canary = "/usr/bin/unitlease"
	_, canaryErr := os.Stat(canary)
	out, err := pkgMake(t.Context(), "package-lint", "DIST="+filepath.Dir(p.deb), "VERSION="+p.version)
	if err != nil {
		t.Fatal(err) // lintian: an error or a warning; rpmlint: an error
	}
	t.Logf("make package-lint:\n%s", out)
	if _, err := os.Stat(canary); os.IsNotExist(canaryErr) && err == nil {
		t.Errorf("rpmlint wrote %s on the host", canary)
	}
}

// pkgFile is one entry of a package.
type pkgFile struct {
	mode  string // ls -l style: "-rw-r-----", "drwxr-xr-x"
	owner string // user:group
	data  []byte // regular files of the .deb only
}

// pkgDebFiles reads the .deb's data archive.
func pkgDebFiles(t *testing.T, deb string) map[string]pkgFile {
	t.Helper()
	tr := tar.NewReader(strings.NewReader(pkgHostStdout(t, "dpkg-deb", "--fsys-tarfile", deb)))
	files := map[string]pkgFile{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		name := "/" + strings.Trim(strings.TrimPrefix(h.Name, "./"), "/")
		f := pkgFile{mode: h.FileInfo().Mode().String(), owner: h.Uname + ":" + h.Gname}
		if h.Uname == "" { // nfpm writes the changelog with numeric ids only
			f.owner = fmt.Sprintf("%d:%d", h.Uid, h.Gid)
		}
		if h.Typeflag == tar.TypeReg {
			if f.data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
		files[name] = f
	}
}

// pkgRPMFiles lists the .rpm's files and their rpm file flags.
func pkgRPMFiles(t *testing.T, rpm string) (map[string]pkgFile, map[string]string) {
	t.Helper()
	out := pkgHostStdout(t, "rpm", "-qp", "--qf", `[%{FILEMODES:perms} %{FILEUSERNAME}:%{FILEGROUPNAME} flags=%{FILEFLAGS:fflags} %{FILENAMES}\n]`, rpm)
	files, flags := map[string]pkgFile{}, map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			t.Fatalf("rpm -qp: unexpected line %q", line)
		}
		files[f[3]] = pkgFile{mode: f[0], owner: f[1]}
		flags[f[3]] = strings.TrimPrefix(f[2], "flags=")
	}
	return files, flags
}

func testPackageFileLists(t *testing.T, p *pkgBuilds) {
	deb := pkgDebFiles(t, p.deb)
	rpm, flags := pkgRPMFiles(t, p.rpm)
	debOnly := []string{
		"/usr/share/doc/unitlease/changelog.Debian.gz", // the .rpm's changelog is in its header
		"/usr/share/lintian/overrides/unitlease",
	}
	for name, r := range rpm {
		d, ok := deb[name]
		switch {
		case !ok:
			t.Errorf("%s is in the .rpm, not in the .deb", name)
		case d.mode != r.mode || d.owner != r.owner:
			t.Errorf("%s: .deb %s %s, .rpm %s %s", name, d.mode, d.owner, r.mode, r.owner)
		}
	}
	for name, d := range deb {
		_, inRPM := rpm[name]
		// Directories that are not ours (/usr/share/man) are shared, and
		// only the .deb lists them.
		ours := d.mode[0] != 'd' || strings.Contains(name, "unitlease")
		if !inRPM && ours && !slices.Contains(debOnly, name) {
			t.Errorf("%s (%s) is in the .deb, not in the .rpm", name, d.mode)
		}
	}
	if len(rpm) < 10 {
		t.Fatalf("the .rpm lists only %d files: %v", len(rpm), rpm)
	}
	// The configuration: a conffile, %config(noreplace), 0640.
	const conf = "/etc/unitlease/unitlease.toml"
	if got := pkgHost(t, "dpkg-deb", "--info", p.deb, "conffiles"); strings.TrimSpace(got) != conf {
		t.Errorf("the .deb's conffiles: %q, want %s", got, conf)
	}
	if f := flags[conf]; !strings.Contains(f, "c") || !strings.Contains(f, "n") {
		t.Errorf("%s has rpm flags %q, want config and noreplace (c, n)", conf, f)
	}
	if deb[conf].mode != "-rw-r-----" {
		t.Errorf("%s is %s, want -rw-r-----", conf, deb[conf].mode)
	}
	for _, doc := range []string{"/usr/share/man/man8/unitlease.8.gz", "/usr/share/doc/unitlease/copyright"} {
		if !strings.Contains(flags[doc], "d") {
			t.Errorf("%s has rpm flags %q, want %%doc (d)", doc, flags[doc])
		}
	}
	t.Logf("%d entries in the .deb, %d in the .rpm, the same paths, modes and owners", len(deb), len(rpm))
}

// pkgConfigKeys are every key of unitlease.toml (internal/config).
var pkgConfigKeys = []string{
	"node",
	"redis.url", "redis.username", "redis.password_file", "redis.key_prefix",
	"redis.ca_file", "redis.cert_file", "redis.key_file", "redis.pool_size",
	"redis.sentinels", "redis.master_name", "redis.db", "redis.tls", "redis.sentinel_username", "redis.sentinel_password_file",
	"timing.profile", "timing.retry", "timing.renew_deadline", "timing.stop_wait", "timing.reply_max",
	"timing.poll_min", "timing.poll_max", "timing.lease_span",
	"metrics.enabled", "metrics.listen",
}

// effective is what a configuration sets: its node, Redis, timing and
// metrics.
func effective(c config.Config) any {
	return struct {
		Node    string
		Redis   config.Redis
		Timing  policy.Timing
		Metrics config.Metrics
	}{c.Node, c.Redis, c.Timing, c.Metrics}
}

// TestPackageConfigIsTheDefaults checks the shipped unitlease.toml: as
// shipped it is the defaults, every key is there commented out, and with
// every key uncommented it is still the defaults (node aside: its default
// is the host name, and the file shows an example).
func TestPackageConfigIsTheDefaults(t *testing.T) {
	data, err := os.ReadFile("../packaging/unitlease.toml")
	if err != nil {
		t.Fatal(err)
	}
	defaults := config.Defaults()
	shipped, err := config.Parse("unitlease.toml", data)
	if err != nil {
		t.Fatalf("the daemon refuses the shipped configuration: %v", err)
	}
	if got, want := effective(*shipped), effective(defaults); !reflect.DeepEqual(got, want) {
		t.Errorf("shipped configuration %+v\nis not the defaults %+v", got, want)
	}
	keyLine := regexp.MustCompile(`^#([a-z_]+) = (.*)$`)
	var uncommented []string
	var found []string
	table := ""
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "[") {
			table = strings.Trim(line, "[]") + "."
		}
		m := keyLine.FindStringSubmatch(line)
		switch {
		case m == nil:
			uncommented = append(uncommented, line)
		case m[1] == "node":
			found = append(found, m[1])
			uncommented = append(uncommented, line)
		default:
			found = append(found, table+m[1])
			uncommented = append(uncommented, line[1:])
		}
	}
	if !slices.Equal(found, pkgConfigKeys) {
		t.Errorf("commented keys %v\nwant %v", found, pkgConfigKeys)
	}
	all, err := config.Parse("unitlease.toml", []byte(strings.Join(uncommented, "\n")))
	if err != nil {
		t.Fatalf("with every key uncommented: %v", err)
	}
	if got, want := effective(*all), effective(defaults); !reflect.DeepEqual(got, want) {
		t.Errorf("with every key uncommented %+v\nis not the defaults %+v", got, want)
	}
	man, err := os.ReadFile("../packaging/man/unitlease.toml.5.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range pkgConfigKeys {
		key := k[strings.LastIndex(k, ".")+1:]
		if !bytes.Contains(man, []byte("**"+key+"**")) {
			t.Errorf("unitlease.toml(5) does not describe %s", k)
		}
	}
}

// testPackageInChroot installs, upgrades and purges both packages in a
// chroot of the nodes' root file system, where systemd does not run: the
// scripts enable the service and leave systemd alone.
func testPackageInChroot(t *testing.T, p *pkgBuilds) {
	rootfs, err := EnsureRootfs(t.Context(), RootfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wants := "/etc/systemd/system/multi-user.target.wants/unitlease.service"
	t.Run("deb", func(t *testing.T) {
		root := pkgChroot(t, rootfs, p.deb, p.upDeb)
		for _, step := range [][]string{{"-i", "/tmp/v1"}, {"-i", "/tmp/v2"}} {
			out := pkgHost(t, "chroot", append([]string{root, "env", "-i", "PATH=" + sbinPath, "dpkg"}, step...)...)
			if strings.Contains(out, "systemctl") || strings.Contains(out, "chroot") {
				t.Errorf("dpkg %v talked to systemd:\n%s", step, out)
			}
			if _, err := os.Lstat(filepath.Join(root, wants)); err != nil {
				t.Errorf("after dpkg %v, the service is not enabled: %v\n%s", step, err, out)
			}
		}
		pkgHost(t, "chroot", root, "env", "-i", "PATH="+sbinPath, "dpkg", "--purge", "unitlease")
		pkgGone(t, root, wants, "/etc/unitlease", "/usr/bin/unitlease", "/usr/libexec/unitlease")
	})
	t.Run("rpm", func(t *testing.T) {
		root := pkgChroot(t, rootfs, p.rpm, p.upRPM)
		pkgHost(t, "rpm", "--root", root, "--initdb")
		// --nodeps: the chroot's rpm database is empty (no /bin/sh in it).
		for _, step := range [][]string{{"-i", "/tmp/v1"}, {"-U", "/tmp/v2"}} {
			pkgHost(t, "rpm", "--root", root, step[0], "--nodeps", filepath.Join(root, step[1]))
			if _, err := os.Lstat(filepath.Join(root, wants)); err != nil {
				t.Errorf("after rpm %v, the service is not enabled: %v", step, err)
			}
		}
		pkgHost(t, "rpm", "--root", root, "-e", "--nodeps", "unitlease")
		pkgGone(t, root, wants, "/etc/unitlease", "/usr/bin/unitlease", "/usr/libexec/unitlease")
	})
}

// pkgChroot mounts an overlay of rootfs for one test, with v1 and v2 in
// its /tmp, and returns its root.
func pkgChroot(t *testing.T, rootfs, v1, v2 string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ul-chroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := removeTree(dir); err != nil {
			t.Error(err)
		}
	})
	root := filepath.Join(dir, "root")
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := mountOverlay(rootfs, filepath.Join(dir, "upper"), filepath.Join(dir, "work"), root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "run/systemd/system")); err == nil {
		t.Fatal("the chroot has /run/systemd/system: it would look like a running systemd")
	}
	for name, src := range map[string]string{"v1": v1, "v2": v2} {
		data, err := os.ReadFile(src)
		if err == nil {
			err = os.WriteFile(filepath.Join(root, "tmp", name), data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func pkgGone(t *testing.T, root string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s is left after the package is gone", p)
		}
	}
}

// pkgNode is the install test's node.
type pkgNode struct {
	t *testing.T
	n *Node
}

func (pn pkgNode) run(args ...string) string {
	pn.t.Helper()
	out, stderr, err := pn.n.Run(pn.t.Context(), args...)
	if err != nil {
		pn.t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return strings.TrimSpace(out)
}

func (pn pkgNode) state(unit string) string { return Active(pn.t.Context(), pn.n, unit) }

func (pn pkgNode) exists(path string) bool {
	_, _, err := pn.n.Run(pn.t.Context(), "test", "-e", path)
	return err == nil
}

// waitActive waits until unit is active; the daemon starts it once it
// holds the lease.
func (pn pkgNode) waitActive(unit string, limit time.Duration) {
	pn.t.Helper()
	deadline := time.Now().Add(limit)
	for pn.state(unit) != "active" {
		if time.Now().After(deadline) {
			pn.t.Fatalf("%s is not active after %v\n%s", unit, limit,
				pn.run("journalctl", "--no-pager", "-o", "cat", "-n", "40"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (pn pkgNode) cursor() string {
	_, c, _ := strings.Cut(pn.run("journalctl", "-n", "0", "--show-cursor", "--no-pager"), "-- cursor: ")
	return strings.TrimSpace(c)
}

// events are the daemon's UNITLEASE_EVENT values for lease since cursor.
func (pn pkgNode) events(cursor, lease string) []string {
	out := pn.run("journalctl", "--no-pager", "--after-cursor", cursor, "-u", "unitlease.service", "-o", "json",
		"--output-fields=UNITLEASE_EVENT,UNITLEASE_LEASE")
	var evs []string
	for _, line := range strings.Split(out, "\n") {
		var e struct {
			Event string `json:"UNITLEASE_EVENT"`
			Lease string `json:"UNITLEASE_LEASE"`
		}
		if json.Unmarshal([]byte(line), &e) == nil && e.Event != "" && e.Lease == lease {
			evs = append(evs, e.Event)
		}
	}
	return evs
}

// footprint lists the files of the node whose names say unitlease.
func (pn pkgNode) footprint() []string {
	out, _, _ := pn.n.Run(pn.t.Context(), "find", "/etc", "/usr", "/var", "/run", "-xdev", "-name", "*unitlease*")
	return strings.Fields(out)
}

const pkgManaged = `[Service]
ExecStart=/bin/sleep infinity

[X-UnitLease]
Lease=ul-pkg
`

// testPackageInstallUpgradeRemovePurge runs the .deb's life on node 0: a
// fresh install enables the service and does not start it; with Redis
// configured it runs a managed unit; an upgrade keeps the edited
// configuration and hands the lease over; removal stops the daemon, which
// releases the lease; purge leaves no file of ours.
func testPackageInstallUpgradeRemovePurge(t *testing.T, p *pkgBuilds) {
	pn := pkgNode{t: t, n: cluster.Node(0)}
	redis := redistest.Start(t, redistest.Options{AppendOnly: true})
	before := pn.footprint()
	t.Cleanup(func() {
		ctx := context.Background()
		for _, args := range [][]string{
			{"dpkg", "--purge", "unitlease"},
			{"rm", "-rf", "/etc/systemd/system/ul-pkg.service", "/run/systemd/system/ul-pkg.service.d", "/tmp/v1.deb", "/tmp/v2.deb"},
			{"systemctl", "daemon-reload"},
			{"systemctl", "reset-failed"},
		} {
			_, _, _ = pn.n.Run(ctx, args...)
		}
	})
	for name, src := range map[string]string{"/tmp/v1.deb": p.deb, "/tmp/v2.deb": p.upDeb} {
		if err := pn.n.CopyIn(t.Context(), src, name, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// A fresh install: enabled, not started, the shipped configuration.
	start := time.Now()
	pn.run("dpkg", "-i", "/tmp/v1.deb")
	t.Logf("dpkg -i: %v", time.Since(start).Round(time.Millisecond))
	if got := pn.run("systemctl", "is-enabled", "unitlease.service"); got != "enabled" {
		t.Errorf("after a fresh install unitlease.service is %s, want enabled", got)
	}
	if got := pn.state("unitlease.service"); got != "inactive" {
		t.Errorf("a fresh install started the daemon (%s): it must wait for the admin", got)
	}
	if got := pn.run("stat", "-c", "%a %U %G", "/etc/unitlease/unitlease.toml"); got != "640 root root" {
		t.Errorf("/etc/unitlease/unitlease.toml is %s, want 640 root root", got)
	}
	if got := pn.run("unitlease", "version"); got != "unitlease "+p.version {
		t.Errorf("unitlease version: %q, want the package's %s", got, p.version)
	}
	// Redis is not set up yet, so check may fail, but not on the configuration.
	out, _, _ := pn.n.Run(t.Context(), "unitlease", "check")
	if !strings.Contains(out, "ok       configuration /etc/unitlease/unitlease.toml") {
		t.Errorf("unitlease check does not accept the shipped configuration:\n%s", out)
	}
	security := pn.run("systemd-analyze", "security", "--no-pager", "unitlease.service")
	exposure := regexp.MustCompile(`Overall exposure level for unitlease.service: ([0-9.]+)`).FindStringSubmatch(security)
	if exposure == nil {
		t.Fatalf("systemd-analyze security:\n%s", security)
	}
	if x, _ := strconv.ParseFloat(exposure[1], 64); x > 2.0 {
		t.Errorf("exposure %s is above 2.0: the sandbox was weakened\n%s", exposure[1], security)
	}
	t.Logf("systemd-analyze security unitlease.service: overall exposure %s", exposure[1])

	// The admin configures Redis and a unit, and starts the daemon.
	edited := fmt.Sprintf("# edited by the admin\nnode = %q\n[redis]\nurl = \"redis://%s/0\"\n%s", pn.n.Name, redis.Addr(), FastTiming)
	if err := pn.n.WriteFile(t.Context(), "/etc/unitlease/unitlease.toml", []byte(edited), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := pn.n.WriteFile(t.Context(), "/etc/systemd/system/ul-pkg.service", []byte(pkgManaged), 0o644); err != nil {
		t.Fatal(err)
	}
	pn.run("systemctl", "daemon-reload")
	pn.run("systemctl", "start", "unitlease.service")
	check := pn.run("unitlease", "check")
	if !strings.Contains(check, "ok       ul-pkg.service: lease ul-pkg") {
		t.Errorf("unitlease check does not report the managed unit:\n%s", check)
	}
	// The packaged WatchdogSec=2s and TimeoutAbortSec=1s give the allowance
	// the lease span covers.
	if !strings.Contains(check, "ok       unitlease.service: WatchdogSec 2s + a third of it + TimeoutAbortSec 1s + systemd's timer slack: a daemon that stops acting is killed, and its units stopped through BindsTo=, within the allowance 4.167s") {
		t.Errorf("unitlease check does not report the watchdog it runs with:\n%s", check)
	}
	pn.waitActive("ul-pkg.service", 30*time.Second)
	if role, holding := pkgRole(pn); role != "leader" || !holding {
		t.Errorf("after start the daemon is %s (holding %t), want the leader", role, holding)
	}

	// Upgrade: the edited configuration stays; the daemon is stopped (the
	// lease released) and the new one started, which takes it again.
	oldID := pn.run("systemctl", "show", "-P", "InvocationID", "unitlease.service")
	cursor := pn.cursor()
	start = time.Now()
	pn.run("dpkg", "-i", "/tmp/v2.deb")
	t.Logf("dpkg -i (upgrade): %v", time.Since(start).Round(time.Millisecond))
	if got := pn.run("unitlease", "version"); got != "unitlease "+p.upgrade {
		t.Errorf("after the upgrade unitlease version is %q, want %s", got, p.upgrade)
	}
	if got := pn.run("cat", "/etc/unitlease/unitlease.toml"); got != strings.TrimSpace(edited) {
		t.Errorf("the upgrade changed the edited configuration:\n%s", got)
	}
	if left := pn.run("find", "/etc/unitlease", "-name", "*.dpkg-*"); left != "" {
		t.Errorf("the upgrade left %s", left)
	}
	if pn.state("unitlease.service") != "active" || pn.run("systemctl", "show", "-P", "InvocationID", "unitlease.service") == oldID {
		t.Errorf("the upgrade did not restart the daemon")
	}
	pn.waitActive("ul-pkg.service", 30*time.Second)
	evs := pn.events(cursor, "ul-pkg")
	if i := slices.Index(evs, "released"); i < 0 || !slices.Contains(evs[i:], "acquired") {
		t.Errorf("the upgrade's events %v: want the old daemon's release, then the new one's acquisition", evs)
	}
	if got := pn.run("systemctl", "is-enabled", "unitlease.service"); got != "enabled" {
		t.Errorf("after the upgrade unitlease.service is %s", got)
	}

	// Removal: the daemon stops and releases; the configuration stays.
	cursor = pn.cursor()
	pn.run("dpkg", "--remove", "unitlease")
	if got := pn.state("unitlease.service"); got != "inactive" {
		t.Errorf("after removal the daemon is %s", got)
	}
	if got := pn.run("systemctl", "show", "-P", "LoadState", "unitlease.service"); got != "not-found" {
		t.Errorf("after removal systemd still has unitlease.service %s: no daemon-reload", got)
	}
	if got := pn.state("ul-pkg.service"); got != "inactive" {
		t.Errorf("after removal the managed unit is %s", got)
	}
	if evs := pn.events(cursor, "ul-pkg"); !slices.Contains(evs, "released") {
		t.Errorf("removal's events %v lack released", evs)
	}
	for path, want := range map[string]bool{
		"/usr/bin/unitlease": false, "/usr/libexec/unitlease/unitlease": false, "/run/systemd/system/ul-pkg.service.d": false, "/etc/unitlease/unitlease.toml": true,
	} {
		if got := pn.exists(path); got != want {
			t.Errorf("after removal, %s exists: %t, want %t", path, got, want)
		}
	}

	// Purge: nothing of ours is left.
	pn.run("dpkg", "--purge", "unitlease")
	pn.run("rm", "/etc/systemd/system/ul-pkg.service")
	pn.run("systemctl", "daemon-reload")
	for _, f := range pn.footprint() {
		if !slices.Contains(before, f) {
			t.Errorf("purge left %s", f)
		}
	}
}

// pkgRole asks the daemon for its role for lease ul-pkg.
func pkgRole(pn pkgNode) (string, bool) {
	var snap struct {
		Leases []struct {
			Lease, Role string
			Holding     bool
		}
	}
	out := pn.run("unitlease", "status", "--json")
	if err := json.Unmarshal([]byte(out), &snap); err != nil || len(snap.Leases) != 1 {
		pn.t.Fatalf("unitlease status --json: %v\n%s", err, out)
	}
	return snap.Leases[0].Role, snap.Leases[0].Holding
}
