//go:build linux

package vmtests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
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
