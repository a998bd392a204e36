package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// SocketPath is the control socket: root only (mode 0600 in a 0700
// directory). status, handoff and guard talk to the daemon through it.
const SocketPath = "/run/unitlease/control.sock"

// Controller is what the control socket serves.
type Controller interface {
	Snapshot(ctx context.Context) Snapshot
	Handoff(ctx context.Context, target string) (HandoffResult, error)
	Guard(unit string) error
}

// Snapshot is this node's view and the cluster's.
type Snapshot struct {
	Node    string        `json:"node"`
	Leases  []Status      `json:"leases"`
	Cluster []ClusterRow  `json:"cluster"`
	Errors  []string      `json:"errors,omitempty"` // config errors, Redis trouble
	Timing  TimingSummary `json:"timing"`
}

// ClusterRow is one lease as Redis has it.
type ClusterRow struct {
	Lease    string `json:"lease"`
	Holder   string `json:"holder,omitempty"`
	Version  uint64 `json:"version,omitempty"`
	State    string `json:"state"`    // held, released, missing, garbage
	Watchers int    `json:"watchers"` // daemons managing it
	Error    string `json:"error,omitempty"`
}

// TimingSummary is the timing in force.
type TimingSummary struct {
	LeaseSpan     time.Duration `json:"lease_span_ns"`
	Retry         time.Duration `json:"retry_ns"`
	RenewDeadline time.Duration `json:"renew_deadline_ns"`
	StopWait      time.Duration `json:"stop_wait_ns"`
}

// HandoffResult says who took the lease.
type HandoffResult struct {
	Lease   string `json:"lease"`
	Holder  string `json:"holder"`
	Version uint64 `json:"version"`
}

// Serve listens on path until ctx ends.
func Serve(ctx context.Context, path string, c Controller) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return err
	}
	srv := &http.Server{Handler: handler(c), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func handler(c Controller) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, c.Snapshot(r.Context()))
	})
	mux.HandleFunc("POST /handoff", func(w http.ResponseWriter, r *http.Request) {
		res, err := c.Handoff(r.Context(), r.URL.Query().Get("target"))
		if err != nil {
			reply(w, http.StatusConflict, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, res)
	})
	mux.HandleFunc("GET /guard", func(w http.ResponseWriter, r *http.Request) {
		if err := c.Guard(r.URL.Query().Get("unit")); err != nil {
			reply(w, http.StatusForbidden, errorBody{err.Error()})
			return
		}
		reply(w, http.StatusOK, struct{}{})
	})
	return mux
}

type errorBody struct {
	Error string `json:"error"`
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Client talks to a daemon's control socket.
type Client struct {
	http *http.Client
}

// Dial returns a client for the socket at path. Requests fail at once if
// no daemon listens there.
func Dial(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{http: &http.Client{Transport: tr}}
}

// Status fetches the snapshot.
func (c *Client) Status(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	return s, c.do(ctx, "GET", "/status", &s)
}

// Handoff asks the daemon to hand target (a lease or unit) to a peer and
// waits for the answer.
func (c *Client) Handoff(ctx context.Context, target string) (HandoffResult, error) {
	var r HandoffResult
	return r, c.do(ctx, "POST", "/handoff?target="+queryEscape(target), &r)
}

// Guard asks whether unit may start on this node now.
func (c *Client) Guard(ctx context.Context, unit string) error {
	return c.do(ctx, "GET", "/guard?unit="+queryEscape(unit), nil)
}

func (c *Client) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://unitlease"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("no answer from the unitlease daemon (is unitlease.service running?): %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.NewDecoder(resp.Body).Decode(&e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return errors.New(e.Error)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func queryEscape(s string) string { return url.QueryEscape(s) }
