//go:build linux

package vmtests

import (
	"io"
	"net"
	"sync"
)

// Proxy forwards TCP connections from a loopback port to a target, so a
// test can cut one node off from Redis without touching the others: Cut
// makes it a black hole (connections stay open, nothing arrives), the
// way a partition looks to the node; Heal forwards again.
type Proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	keep  func(client net.Conn) bool // during a cut, the clients still forwarded
	conns map[net.Conn]net.Conn      // a connection to the target: its client's; a client's: nil
}

// NewProxy listens on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]net.Conn{}}
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Cut drops every connection's traffic from now on and leaves new ones
// unanswered.
func (p *Proxy) Cut() { p.CutExcept(nil) }

// CutExcept is Cut for every client but those keep accepts (nil: none):
// a partition with the target and those clients on one side.
func (p *Proxy) CutExcept(keep func(client net.Conn) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.keep = true, keep
	for c, client := range p.conns {
		if client != nil && (keep == nil || !keep(client)) {
			c.Close() // the forwarding ends; serve holds the node's side open
		}
	}
}

// forwards reports whether client's traffic passes; p.mu is held.
func (p *Proxy) forwards(client net.Conn) bool {
	return !p.cut || p.keep != nil && p.keep(client)
}

// Heal forwards new connections again. Connections open during the cut
// stay dead, as after a real partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.keep = false, nil
}

// Close stops the proxy and every connection.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

// track notes c (a client's connection, or with client set the
// connection to the target made for it) and reports whether the client's
// traffic passes.
func (p *Proxy) track(c, client net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = client
	if client == nil {
		client = c
	}
	return p.forwards(client)
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) serve(c net.Conn) {
	if !p.track(c, nil) {
		p.hold(c)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		p.untrack(c)
		return
	}
	p.track(up, c)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	p.mu.Lock()
	cut := !p.forwards(c)
	p.mu.Unlock()
	up.Close()
	p.untrack(up)
	if cut {
		p.hold(c) // the node sees silence, not a reset
		return
	}
	c.Close()
	p.untrack(c)
}

// hold reads and discards until the node gives up on the connection.
func (p *Proxy) hold(c net.Conn) {
	_, _ = io.Copy(io.Discard, c)
	c.Close()
	p.untrack(c)
}
