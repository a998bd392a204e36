//go:build linux

package vmtests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// sbinPath is the PATH given to host tools such as debootstrap, which call
// programs from the sbin directories.
const sbinPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookTool finds a host program on PATH or in the sbin directories, which a
// non-login root shell may lack on PATH.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range filepath.SplitList(sbinPath) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %s", name, sbinPath)
}

// toolPackages names the Debian package that brings each host tool.
var toolPackages = map[string]string{
	"systemd-nspawn": "systemd-container",
	"nsenter":        "util-linux",
	"debootstrap":    "debootstrap",
	"sh":             "dash",
}

// CheckHost reports every missing prerequisite of booting nodes: root and
// the host tools. It does not check debootstrap, which only a cache build
// needs (EnsureRootfs checks it then).
func CheckHost() error {
	var errs []error
	if os.Geteuid() != 0 {
		errs = append(errs, errors.New("vm-tests need root (mounts, cgroups, systemd-nspawn): run them as root"))
	}
	for _, tool := range []string{"systemd-nspawn", "nsenter", "sh"} {
		if err := needTool(tool); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := findCgroupRoots(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func needTool(tool string) error {
	if _, err := lookTool(tool); err != nil {
		return fmt.Errorf("%w (apt-get install %s)", err, toolPackages[tool])
	}
	return nil
}
