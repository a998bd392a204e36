// Package redistest starts a real redis-server on a free loopback port in a
// temporary directory for tests, and stops it when the test ends.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Options shape the server.
type Options struct {
	// AppendOnly turns on the AOF with appendfsync always, or Fsync.
	AppendOnly bool
	Fsync      string
	// TLS, when set, serves only TLS with these files (PEM).
	TLS *TLSFiles
	// Config lines appended to the generated redis.conf.
	Config []string
	// Password, when set, is the default user's password (requirepass,
	// and masterauth for a replica); Command and the readiness check
	// send it through the environment, never the command line.
	Password string
}

// TLSFiles are the server's certificate, key and the CA that signs clients.
type TLSFiles struct {
	Cert, Key, CA string
	// ClientCert and ClientKey are what redis-cli presents (Command and the
	// readiness check).
	ClientCert, ClientKey string
	// RequireClientCert makes the server refuse clients without a
	// certificate signed by CA.
	RequireClientCert bool
}

// Server is one running redis-server.
type Server struct {
	Port int
	Dir  string
	opts Options
	cmd  *exec.Cmd
	t    failer
	bin  string // redis-sentinel for a sentinel; "" for redis-server
	// front is the port others reach a replicated server at (Sentinel's
	// Front), its own port without one.
	front int
}

// failer is what Server needs of a testing.TB; Run supplies one for
// commands.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Start runs redis-server and waits until it answers PING. The server is
// stopped at the end of the test.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redistest: redis-server is not installed (apt-get install redis-server): %v", err)
	}
	s := &Server{Dir: t.TempDir(), opts: opts, t: t, Port: FreePort(t)}
	s.start()
	t.Cleanup(s.Stop)
	return s
}

// Run starts a server in dir for a command (a benchmark, say) rather than a
// test; failures end the program. Call Stop when done.
func Run(dir string, opts Options) *Server {
	f := exitFailer{}
	s := &Server{Dir: dir, opts: opts, t: f, Port: FreePort(f)}
	s.start()
	return s
}

type exitFailer struct{}

func (exitFailer) Helper() {}
func (exitFailer) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// Addr is host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is a redis:// (or rediss://) URL for database 0.
func (s *Server) URL() string {
	scheme := "redis"
	if s.opts.TLS != nil {
		scheme = "rediss"
	}
	return scheme + "://" + s.Addr() + "/0"
}

func (s *Server) config() string {
	if s.bin != "" {
		lines := []string{"bind 127.0.0.1", "port " + strconv.Itoa(s.Port), "dir " + s.Dir,
			"logfile " + filepath.Join(s.Dir, "redis.log"), "daemonize no"}
		if s.opts.Password != "" {
			lines = append(lines, "requirepass "+s.opts.Password)
		}
		return strings.Join(append(lines, s.opts.Config...), "\n") + "\n"
	}
	lines := []string{
		"bind 127.0.0.1",
		"protected-mode yes",
		"dir " + s.Dir,
		"logfile " + filepath.Join(s.Dir, "redis.log"),
		`save ""`,
		"daemonize no",
	}
	if s.opts.AppendOnly {
		fsync := s.opts.Fsync
		if fsync == "" {
			fsync = "always"
		}
		lines = append(lines, "appendonly yes", "appendfsync "+fsync)
	} else {
		lines = append(lines, "appendonly no")
	}
	if tls := s.opts.TLS; tls != nil {
		auth := "optional"
		if tls.RequireClientCert {
			auth = "yes"
		}
		lines = append(lines, "port 0", "tls-port "+strconv.Itoa(s.Port),
			"tls-cert-file "+tls.Cert, "tls-key-file "+tls.Key,
			"tls-ca-cert-file "+tls.CA, "tls-auth-clients "+auth)
	} else {
		lines = append(lines, "port "+strconv.Itoa(s.Port))
	}
	if pw := s.opts.Password; pw != "" {
		lines = append(lines, "requirepass "+pw, "masterauth "+pw)
	}
	return strings.Join(append(lines, s.opts.Config...), "\n") + "\n"
}

// cli is redis-cli with args on this server, the password in its
// environment.
func (s *Server) cli(ctx context.Context, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, "redis-cli", append(s.cliArgs(), args...)...)
	if s.opts.Password != "" {
		c.Env = append(os.Environ(), "REDISCLI_AUTH="+s.opts.Password)
	}
	return c
}

func (s *Server) start() {
	s.t.Helper()
	conf := filepath.Join(s.Dir, "redis.conf")
	if err := os.WriteFile(conf, []byte(s.config()), 0o600); err != nil {
		s.t.Fatalf("%v", err)
	}
	bin := "redis-server"
	if s.bin != "" {
		bin = s.bin
	}
	s.cmd = exec.Command(bin, conf)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", bin, err)
	}
	if err := s.waitUp(10 * time.Second); err != nil {
		s.Stop()
		s.t.Fatalf("redistest: %v\n%s", err, s.Log())
	}
}

// waitUp polls until the server answers PING (not LOADING); this is the
// harness waiting for a child process, not a test's synchronisation.
func (s *Server) waitUp(limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		out, err := s.cli(ctx, "PING").CombinedOutput()
		if err == nil && strings.TrimSpace(string(out)) == "PONG" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis-server on %s not up after %v: %s %v", s.Addr(), limit, out, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) cliArgs() []string {
	args := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)}
	if tls := s.opts.TLS; tls != nil {
		args = append(args, "--tls", "--cacert", tls.CA, "--cert", tls.ClientCert, "--key", tls.ClientKey)
	}
	return args
}

// Stop ends the server (SIGKILL: a crash, not a clean shutdown, so nothing
// but the AOF survives) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Freeze stops the server's process (SIGSTOP): it neither answers nor
// copies from its master until Thaw.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil || s.cmd.Process == nil {
		s.t.Fatalf("redistest: signal %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v: %v", sig, err)
	}
}

// Restart crashes the server and starts it again on the same port and
// directory.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Log returns the server's log file.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t failer) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Command runs one command on the server with redis-cli and returns its
// reply, for test setup that must not go through the code under test.
func (s *Server) Command(args ...string) string {
	s.t.Helper()
	out, err := s.cli(context.Background(), args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines, "\n")
}
