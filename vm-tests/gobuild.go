//go:build linux

package vmtests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// BuildStatic builds the Go package pkg (for example "./testdata/probe",
// relative to the current directory, which is the package's directory
// under go test) with CGO_ENABLED=0 into the file out, a static binary
// that runs in any node. Copy it in with Node.CopyIn.
func BuildStatic(ctx context.Context, pkg, out string, flags ...string) error {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("BuildStatic needs the go command on PATH: %w", err)
	}
	args := append(append([]string{"build"}, flags...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Make runs make in dir with env added to (and replacing the same keys
// of) this process's environment, but without the flags of a make that
// may be running this one, and returns its output without the trailing
// newline.
func Make(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "make", append([]string{"-C", dir}, args...)...)
	drop := map[string]bool{"MAKEFLAGS": true, "MFLAGS": true, "MAKELEVEL": true}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop[k] = true
	}
	cmd.Env = slices.Clone(env)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !drop[k] {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("make %s: %w\n%s%s", strings.Join(args, " "), err, out.Bytes(), errOut.Bytes())
	}
	return strings.TrimSpace(out.String()), nil
}

// Programs is unitlease built as the packages install it: the launcher at
// /usr/bin/unitlease, which answers the guard itself and execs the full
// program, at /usr/libexec/unitlease/unitlease, for every other command.
type Programs struct {
	Launcher, Program string // static binaries on the host
}

// BuildUnitlease builds both programs into dir; root is the module's
// directory relative to the current one ("." or ".."), flags go to both
// builds.
func BuildUnitlease(ctx context.Context, root, dir string, flags ...string) (Programs, error) {
	p := Programs{Launcher: filepath.Join(dir, "unitlease-launcher"), Program: filepath.Join(dir, "unitlease")}
	if err := BuildStatic(ctx, "./"+filepath.Join(root, "cmd/launcher"), p.Launcher, flags...); err != nil {
		return Programs{}, err
	}
	if err := BuildStatic(ctx, "./"+filepath.Join(root, "cmd/unitlease"), p.Program, flags...); err != nil {
		return Programs{}, err
	}
	return p, nil
}

// Install copies both programs into n where the packages put them.
func (p Programs) Install(ctx context.Context, n *Node) error {
	if err := n.CopyIn(ctx, p.Launcher, "/usr/bin/unitlease", 0o755); err != nil {
		return err
	}
	return n.CopyIn(ctx, p.Program, "/usr/libexec/unitlease/unitlease", 0o755)
}
