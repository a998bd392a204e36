//go:build linux

package vmtests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
