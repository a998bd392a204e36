// Command launcher is /usr/bin/unitlease as the packages install it. It
// answers `unitlease guard UNIT` itself, and hands every other command to
// the full program (/usr/libexec/unitlease/unitlease) by exec, under the
// same process ID, so `unitlease run` is still the main process that
// systemd started.
//
// The guard runs as ExecStartPre= of every start of every managed unit. A
// Go program's start costs in proportion to the code it links: the full
// program's packages (the Redis client, the D-Bus client, the metrics
// library) take longer to load and initialise than the guard takes to
// ask the daemon. This one links only what the question needs.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// program is the full unitlease program; the build may set it
// (-ldflags -X main.program=PATH).
var program = "/usr/libexec/unitlease/unitlease"

// socketPath is the daemon's control socket (control.SocketPath).
var socketPath = "/run/unitlease/control.sock"

// guardTimeout bounds the guard's question, as the full program's guard.
const guardTimeout = 10 * time.Second

func main() {
	if len(os.Args) == 3 && os.Args[1] == "guard" && !strings.HasPrefix(os.Args[2], "-") {
		if err := guard(os.Args[2], time.Now().Add(guardTimeout)); err != nil {
			fmt.Fprintln(os.Stderr, "unitlease guard: refusing to start", os.Args[2]+":", err)
			os.Exit(1)
		}
		return
	}
	err := syscall.Exec(program, append([]string{os.Args[0]}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "unitlease: cannot run %s: %v\n", program, err)
	os.Exit(1)
}

// guard asks the daemon whether unit may start on this node now: one
// HTTP/1.0 request on the control socket, as the full program's client
// sends it. nil means yes.
func guard(unit string, deadline time.Time) error {
	c, err := net.DialTimeout("unix", socketPath, time.Until(deadline))
	if err != nil {
		return fmt.Errorf("no answer from the unitlease daemon (is unitlease.service running?): %w", err)
	}
	defer c.Close()
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	req := "GET /guard?unit=" + url.QueryEscape(unit) + " HTTP/1.0\r\nHost: unitlease\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return fmt.Errorf("no answer from the unitlease daemon (is unitlease.service running?): %w", err)
	}
	resp, err := io.ReadAll(io.LimitReader(c, 64<<10))
	if err != nil {
		return fmt.Errorf("no answer from the unitlease daemon (is unitlease.service running?): %w", err)
	}
	return answer(resp)
}

// answer reads the daemon's reply: 200 admits the start, anything else
// refuses it with the daemon's reason ({"error": "..."}) or the status.
func answer(resp []byte) error {
	head, body, ok := strings.Cut(string(resp), "\r\n\r\n")
	status, _, _ := strings.Cut(head, "\r\n")
	proto, status, _ := strings.Cut(status, " ")
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return errors.New("no answer from the unitlease daemon: not an HTTP reply")
	}
	if status[:3] == "200" {
		return nil
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
		return errors.New(status)
	}
	return errors.New(e.Error)
}
