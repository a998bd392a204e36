package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
)

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
// A non-empty to names the node the release offers the lease to.
func (c *Client) Handoff(ctx context.Context, target, to string) (HandoffResult, error) {
	var r HandoffResult
	q := "/handoff?target=" + queryEscape(target)
	if to != "" {
		q += "&to=" + queryEscape(to)
	}
	return r, c.do(ctx, "POST", q, &r)
}

// Drain asks the daemon to drain its node; stop also stops the leases no
// peer is ready for.
func (c *Client) Drain(ctx context.Context, stop bool) (DrainResult, error) {
	var r DrainResult
	q := "/drain"
	if stop {
		q += "?stop=1"
	}
	return r, c.do(ctx, "POST", q, &r)
}

// Undrain lets the node take leases again.
func (c *Client) Undrain(ctx context.Context) (DrainResult, error) {
	var r DrainResult
	return r, c.do(ctx, "POST", "/undrain", &r)
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
