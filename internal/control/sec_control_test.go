package control

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestCgroupEscapedUnitName: systemd escapes a unit's cgroup name
// (cg_escape): a name that starts with '_' or '.', or whose part before
// the last '.' is a controller's name (io, memory, pids, ...), gets a '_'
// in front. The guard compares with the unit's ControlGroup property as
// systemd reports it, so io.service's own process, in
// /system.slice/_io.service, passes its guard.
func TestCgroupEscapedUnitName(t *testing.T) {
	for _, c := range []struct{ text, cg string }{
		{"0::/system.slice/_io.service\n", "/system.slice/_io.service"},
		{"0::/system.slice/_memory.service\n", "/system.slice/_memory.service"},
		{"0::/system.slice/_pids.service\n", "/system.slice/_pids.service"},
		{"0::/system.slice/__backup.service\n", "/system.slice/__backup.service"},
		{"0::/system.slice/_io.service/sub\n", "/system.slice/_io.service"},
	} {
		if !inCgroup(c.text, c.cg) {
			t.Errorf("a process in %q is not in %s", c.text, c.cg)
		}
	}
}

// TestCgroupComponentAnywhere: only the unit's own ControlGroup path
// admits, in the unified hierarchy (or name=systemd on hybrid): a root
// process that is not in db.service is refused even where a path
// component is named db.service: root's user manager's own db.service
// (systemctl --user), a container's or a delegated service's sub-cgroup,
// a cgroup v1 named hierarchy (any root process can mkdir there), a
// top-level cgroup of that name, or a sibling whose name starts the same.
func TestCgroupComponentAnywhere(t *testing.T) {
	for _, text := range []string{
		"0::/user.slice/user-0.slice/user@0.service/app.slice/db.service\n",
		"0::/system.slice/docker.service/db.service\n",
		"0::/machine.slice/machine-c1.scope/payload/system.slice/db.service\n",
		"0::/db.service\n",
		"0::/system.slice/db.service2\n",
		"5:name=mine:/system.slice/db.service\n0::/user.slice/user-0.slice/session-3.scope\n",
		"4:memory:/system.slice/db.service\n0::/user.slice/user-0.slice/session-3.scope\n",
	} {
		if inCgroup(text, "/system.slice/db.service") {
			t.Errorf("%q: admitted as db.service", text)
		}
	}
}

// TestSecIdleKeepAliveStarvesGuard: MaxConns counts connections,
// not requests, and an idle keep-alive connection keeps its slot until
// IdleTimeout (10 s), renewed by every request. 32 clients that poll
// status every second (32 `unitlease status -w`, a monitoring agent with
// a connection pool, ...) hold every slot for good: the guard's
// connection waits in the backlog, and every unit start fails after the
// guard's 10 s. Callers must be root, so this is robustness more than a
// privilege boundary, but one stuck poller per slot is enough.
// Fix: srv.SetKeepAlivesEnabled(false) (one request per connection, a
// slot held for one request's time), and/or serve the guard on its own
// socket or slots.
func TestSecIdleKeepAliveStarvesGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	serveAt(t, path, &fakeService{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ready := make(chan struct{}, MaxConns)
	for range MaxConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(path)
			defer c.CloseIdleConnections()
			first := true
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://unitlease/status", nil)
				if resp, err := c.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body) // read to the end: the connection is kept
					resp.Body.Close()
				}
				if first {
					ready <- struct{}{}
					first = false
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	for range MaxConns {
		<-ready
	}
	gctx, gcancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer gcancel()
	if err := Dial(path).Guard(gctx, "x.service"); err != nil {
		t.Errorf("the guard behind %d status pollers: %v", MaxConns, err)
	}
}

// TestSecSymlinkedSocketDir: Listen refuses a symlink for the
// directory (it holds).
func TestSecSymlinkedSocketDir(t *testing.T) {
	root := t.TempDir()
	real := filepath.Join(root, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "run")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(filepath.Join(link, "control.sock")); err == nil {
		l.Close()
		t.Error("a symlinked directory accepted")
	}
}

// TestSecStatusWatchersStarveGuard: the same with the package's own
// client, as `unitlease status -w` uses it (one Client, Status every
// second).
func TestSecStatusWatchersStarveGuard(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "control.sock")
	serveAt(t, path, &fakeService{})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ready := make(chan struct{}, MaxConns)
	for range MaxConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := Dial(path)
			defer c.http.CloseIdleConnections()
			first := true
			for ctx.Err() == nil {
				_, _ = c.Status(ctx)
				if first {
					ready <- struct{}{}
					first = false
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
		}()
	}
	for range MaxConns {
		<-ready
	}
	gctx, gcancel := context.WithTimeout(t.Context(), 4*time.Second)
	defer gcancel()
	if err := Dial(path).Guard(gctx, "x.service"); err != nil {
		t.Errorf("the guard behind %d `status -w`: %v", MaxConns, err)
	}
}
