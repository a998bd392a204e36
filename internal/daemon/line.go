package daemon

import "sync"

// A workLine is work waiting to be done, as data, and at most a few
// goroutines doing it in the order it came: for bursts of small jobs
// that nobody waits on (history notes, nudges), which a goroutine each
// would turn into thousands at once. The runtime keeps every goroutine
// descriptor it ever made, so a burst's goroutines cost memory for the
// process's life.
type workLine struct {
	mu      sync.Mutex
	q       []func()
	workers int // the goroutines at work on the line
}

// add puts f in the line, and a goroutine to it if fewer than most are
// at work.
func (l *workLine) add(most int, f func()) {
	l.mu.Lock()
	l.q = append(l.q, f)
	start := l.workers < most
	if start {
		l.workers++
	}
	l.mu.Unlock()
	if start {
		go l.drain()
	}
}

// drain does the work in the line until it is empty.
func (l *workLine) drain() {
	for {
		l.mu.Lock()
		if len(l.q) == 0 {
			l.workers--
			l.q = nil // an empty line keeps no array
			l.mu.Unlock()
			return
		}
		f := l.q[0]
		l.q[0] = nil
		l.q = l.q[1:]
		l.mu.Unlock()
		f()
	}
}
