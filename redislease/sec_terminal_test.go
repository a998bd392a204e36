package redislease

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
)

// fakeRedis answers RESP2 commands as a hostile (or impersonated: plain
// TCP to another host, which check only warns about) server would.
func fakeRedis(t *testing.T, answer func(cmd []string) string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil || !strings.HasPrefix(line, "*") {
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
					var cmd []string
					for range n {
						if _, err := r.ReadString('\n'); err != nil { // $len
							return
						}
						arg, err := r.ReadString('\n')
						if err != nil {
							return
						}
						cmd = append(cmd, strings.TrimRight(arg, "\r\n"))
					}
					if _, err := c.Write([]byte(answer(cmd))); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func bulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// TestSecDurabilityFindingsCarryServerText: appendfsync comes from
// CONFIG GET verbatim and goes into a finding, which `check` prints with
// %s: a server's escape sequences (retitle, clear, hide the lines before,
// fake an "ok" line) reach the operator's terminal raw. status quotes
// every name (shown); check quotes nothing the server says (also the
// error replies in "redis ...: %v", the sentinels' replica addresses in
// "replica %s is down").
func TestSecDurabilityFindingsCarryServerText(t *testing.T) {
	evil := "\x1b[2K\r\x1b[1Aok       redis durability: fine\x1b]0;pwned\x07"
	addr := fakeRedis(t, func(cmd []string) string {
		switch strings.ToUpper(cmd[0]) {
		case "INFO":
			return bulk("# Persistence\r\naof_enabled:1\r\n# Replication\r\nrole:master\r\nconnected_slaves:0\r\n")
		case "CONFIG":
			return "*2\r\n" + bulk("appendfsync") + bulk(evil)
		case "HELLO":
			return "-ERR unknown command\r\n"
		}
		return "+OK\r\n"
	})
	s, err := New(Config{URL: "redis://" + addr, KeyPrefix: "unitlease:", Node: "n", ReplyMax: 2 * time.Second, LeaseSpan: 37 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d := s.Durability(bg)
	for _, f := range d.Findings {
		for _, r := range f {
			if !unicode.IsPrint(r) {
				t.Errorf("finding %q holds %q from the server, printed raw by check", f, r)
				break
			}
		}
	}
}

// TestSecGarbageReasonCarriesRawText: GarbageError quotes the key
// and the value, but its Reason quotes the version and lease_span_ms as
// raw JSON text (%s of a json.RawMessage). JSON strings may hold U+202E
// (right-to-left override), U+2028 and the C1 controls (U+009B is CSI on
// terminals that take 8-bit controls) unescaped, so a value in Redis puts
// them, raw, into `unitlease reset`'s "replacing %v" line and the
// daemon's garbage log entries.
// Fix: %q (or strconv.Quote) for every value-derived part of Reason.
func TestSecGarbageReasonCarriesRawText(t *testing.T) {
	tok := strings.Repeat("a", 32)
	for _, raw := range []string{
		`{"holder":"a","version":"` + "\u202e\u009b2J\u2028" + `","token":"` + tok + `","state":"held","lease_span_ms":1}`,
		`{"holder":"a","version":1,"token":"` + tok + `","state":"held","lease_span_ms":["` + "\u202e\u009b2J" + `"]}`,
	} {
		_, err := Decode("unitlease:lease:db", raw)
		if err == nil {
			t.Fatalf("%q decoded", raw)
		}
		for _, r := range err.Error() {
			if !unicode.IsPrint(r) {
				t.Errorf("the garbage message %q holds %q raw", err, r)
				break
			}
		}
	}
}
