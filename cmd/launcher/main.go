// Command launcher is /usr/bin/unitlease as the packages install it. It
// answers `unitlease guard UNIT` itself, and hands every other command to
// the full program (/usr/libexec/unitlease/unitlease) by exec, under the
// same process ID, so `unitlease run` is still the main process that
// systemd started.
//
// The guard runs as ExecStartPre= of every start of every managed unit,
// so its cost is paid thousands of times when a node starts thousands of
// units. A Go program's start costs in proportion to what it links and
// initialises: the full program's packages (the Redis client, the D-Bus
// client, the metrics library) take far longer to load than the guard
// takes to ask the daemon, and even net, net/url, encoding/json and fmt
// cost this one a third more (BenchmarkGuardProcess, on a 2-core VM: 8.6
// to 9.0 ms of CPU per run with them, 6.4 to 7.1 ms now, 5.1 to 5.9 ms
// for a Go program that does nothing). So it links os,
// syscall, strconv, unicode/utf8 and time only: the socket is dialled
// with system calls, the request escaped by hand, and the reply's
// {"error": "..."} read by a decoder of one JSON string.
package main

import (
	"os"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"
)

// program is the full unitlease program; the build may set it
// (-ldflags -X main.program=PATH).
var program = "/usr/libexec/unitlease/unitlease"

// socketPath is the daemon's control socket (control.SocketPath).
var socketPath = "/run/unitlease/control.sock"

// guardTimeout bounds the guard's question, as the full program's guard.
const guardTimeout = 10 * time.Second

// maxReply bounds what the guard reads of the daemon's reply.
const maxReply = 64 << 10

// noAnswer starts every refusal for a daemon that did not answer.
const noAnswer = "no answer from the unitlease daemon (is unitlease.service running?): "

func main() {
	if len(os.Args) == 3 && os.Args[1] == "guard" && (os.Args[2] == "" || os.Args[2][0] != '-') {
		if err := guard(os.Args[2], time.Now().Add(guardTimeout)); err != "" {
			os.Stderr.WriteString("unitlease guard: refusing to start " + os.Args[2] + ": " + err + "\n")
			os.Exit(1)
		}
		return
	}
	args := append([]string{os.Args[0]}, os.Args[1:]...)
	err := syscall.Exec(program, args, os.Environ())
	os.Stderr.WriteString("unitlease: cannot run " + program + ": " + err.Error() + "\n")
	os.Exit(1)
}

// guard asks the daemon whether unit may start on this node now: one
// HTTP/1.0 request on the control socket, as the full program's client
// sends it. "" means yes; anything else is why not. Every way the
// question can fail refuses the start: no socket, no answer by deadline,
// a reply cut short or not HTTP, any status but 200.
func guard(unit string, deadline time.Time) string {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return noAnswer + "socket: " + err.Error()
	}
	defer syscall.Close(fd)
	// A connect waits while the daemon's backlog is full, and reads while
	// it has not answered: each call is bounded by what is left of
	// deadline (SO_SNDTIMEO bounds a connect on a Unix socket).
	if err := connect(fd, socketPath, deadline); err != nil {
		return noAnswer + "connect " + socketPath + ": " + timedOut(err).Error()
	}
	req := "GET /guard?unit=" + queryEscape(unit) + " HTTP/1.0\r\nHost: unitlease\r\n\r\n"
	for b := []byte(req); len(b) > 0; {
		if err := timeout(fd, syscall.SO_SNDTIMEO, deadline); err != nil {
			return noAnswer + err.Error()
		}
		n, err := syscall.Write(fd, b)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return noAnswer + "write: " + timedOut(err).Error()
		}
		b = b[n:]
	}
	resp := make([]byte, maxReply) // pages are touched only as the reply fills them
	got := 0
	for got < len(resp) {
		if err := timeout(fd, syscall.SO_RCVTIMEO, deadline); err != nil {
			return noAnswer + err.Error()
		}
		n, err := syscall.Read(fd, resp[got:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return noAnswer + "read: " + timedOut(err).Error()
		}
		if n == 0 {
			break
		}
		got += n
	}
	return answer(resp[:got])
}

// connect connects fd to the Unix socket at path, again if a signal
// interrupts it. Each try waits at most what is left of deadline: the
// kernel starts the socket's timeout afresh on every call, so a timeout
// set once would let a stream of signals keep the guard waiting for good.
func connect(fd int, path string, deadline time.Time) error {
	for {
		if err := timeout(fd, syscall.SO_SNDTIMEO, deadline); err != nil {
			return err
		}
		err := syscall.Connect(fd, &syscall.SockaddrUnix{Name: path})
		if err != syscall.EINTR {
			return err
		}
	}
}

// timeout sets fd's send or receive timeout to what is left until
// deadline; an error once it has passed. (A zero timeout would mean none.)
func timeout(fd, opt int, deadline time.Time) error {
	left := time.Until(deadline)
	if left <= 0 {
		return errDeadline
	}
	tv := syscall.NsecToTimeval(max(left.Nanoseconds(), int64(time.Microsecond)))
	return syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, opt, &tv)
}

// errDeadline is the guard's question outliving guardTimeout.
var errDeadline = syscall.ETIMEDOUT

// timedOut names a socket timeout (EAGAIN on a blocking socket) for
// what it is.
func timedOut(err error) error {
	if err == syscall.EAGAIN {
		return errDeadline
	}
	return err
}

// queryEscape escapes s for a query's value, as net/url's QueryEscape
// reads back: unreserved bytes as they are, every other byte as %XX.
func queryEscape(s string) string {
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)*3)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	return string(b)
}

// answer reads the daemon's reply: 200 admits the start (""), anything
// else refuses it with the daemon's reason ({"error": "..."}) or the
// status.
func answer(resp []byte) string {
	s := string(resp)
	head, body, ok := cut(s, "\r\n\r\n")
	status, _, _ := cut(head, "\r\n")
	proto, status, _ := cut(status, " ")
	if !ok || len(proto) < 7 || proto[:7] != "HTTP/1." || len(status) < 3 || len(status) > 3 && status[3] != ' ' {
		return "no answer from the unitlease daemon: not an HTTP reply"
	}
	if status[:3] == "200" {
		return ""
	}
	if reason := errorOf(body); reason != "" {
		return reason
	}
	return status
}

// cut is strings.Cut (strings is not linked for it alone).
func cut(s, sep string) (before, after string, found bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

// errorOf is the string the daemon's body {"error": "..."} carries, or
// "" for any other body. It reads what encoding/json writes there: one
// object with one member, whitespace around the tokens.
func errorOf(body string) string {
	p := &jsonText{s: body}
	if !p.skip('{') || !p.skip('"') {
		return ""
	}
	key, ok := p.str()
	if !ok || key != "error" || !p.skip(':') || !p.skip('"') {
		return ""
	}
	v, ok := p.str()
	if !ok || !p.skip('}') {
		return ""
	}
	p.space()
	if p.i != len(p.s) {
		return ""
	}
	return v
}

// jsonText reads JSON tokens from s.
type jsonText struct {
	s string
	i int
}

func (p *jsonText) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

// skip passes whitespace and then c, and reports whether c was there.
func (p *jsonText) skip(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads the rest of a string whose opening quote was passed.
func (p *jsonText) str() (string, bool) {
	var b []byte
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if 0xd800 <= r && r < 0xdc00 && p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
				save := p.i
				p.i += 2
				if lo, ok := p.hex4(); ok && 0xdc00 <= lo && lo < 0xe000 {
					r = 0x10000 + (r-0xd800)<<10 + (lo - 0xdc00)
				} else {
					p.i = save
				}
			}
			b = utf8.AppendRune(b, r) // a lone surrogate is U+FFFD, as encoding/json reads it
		default:
			return "", false
		}
	}
	return "", false
}

// hex4 reads the four hex digits of a \u escape.
func (p *jsonText) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	v, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(v), true
}
