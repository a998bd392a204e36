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
	conns map[net.Conn]bool // true: a connection to the target
}

// NewProxy listens on a free loopback port.
func NewProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]bool{}}
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Cut drops every connection's traffic from now on and leaves new ones
// unanswered.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c, upstream := range p.conns {
		if upstream {
			c.Close() // the forwarding ends; serve holds the node's side open
		}
	}
}

// Heal forwards new connections again. Connections open during the cut
// stay dead, as after a real partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
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

func (p *Proxy) track(c net.Conn, upstream bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.conns[c] = upstream
	return !p.cut
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.conns, c)
}

func (p *Proxy) serve(c net.Conn) {
	if !p.track(c, false) {
		p.hold(c)
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		p.untrack(c)
		return
	}
	p.track(up, true)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	p.mu.Lock()
	cut := p.cut
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
