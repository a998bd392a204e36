package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/unitlease/unitlease/internal/config"
	"github.com/unitlease/unitlease/internal/logging"
	"github.com/unitlease/unitlease/internal/redistest"
)

// secrets are passwords with every character that has a meaning in a URL,
// a TOML string, a shell, a log line or a terminal.
var secrets = []string{
	`hunter2-plain`, `p"a"ss-quote`, `back\slash-pw`, "tab\there-pw", `at@sign-pw`, `per%cent-pw`, `%zz-bad-escape`,
	`colon:pw-x`, `sp ace-pw`, `slash/pw-x`, `q?mark-pw`, `hash#pw-x`, `brace}{-pw`, `[v6]-pw`, `amp&pw=x`,
	`dollar$pw-x`, "quote'pw-x", "backtick`pw", "nl\\nliteral-pw", "ünïcode-pw", "\u202e-rlo-pw",
}

// forms are what a password may look like once some layer escaped it.
func forms(pw string) []string {
	return []string{pw, url.QueryEscape(pw), url.PathEscape(pw), fmt.Sprintf("%q", pw)[1 : len(fmt.Sprintf("%q", pw))-1]}
}

func leaks(t *testing.T, where, text, pw string) {
	t.Helper()
	for _, f := range forms(pw) {
		if strings.Contains(text, f) {
			t.Errorf("%s shows the password %q (as %q):\n%s", where, pw, f, text)
			return
		}
	}
}

// TestNoSecretInAnyMessage: a password, whatever its characters, never
// appears in what unitlease prints or logs, on every path that can fail
// with it in hand: a URL that holds it (run's config_error entry, every
// field of it, and check), and a password file or a Sentinel password
// file whose password Redis refuses, accepts, or never gets (nothing
// listens, TLS to a plain server, sentinels that do not answer).
func TestNoSecretInAnyMessage(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deadPort := redistest.FreePort(t)
	t.Cleanup(func() { newLog = logging.New })
	var wg sync.WaitGroup
	for i, pw := range secrets {
		// A URL that holds the password: refused, in run's journal entry
		// (message and fields) and in check's output.
		conf := file(fmt.Sprintf("url-%d.toml", i), "node = \"n1\"\n[redis]\nurl = '''redis://unitlease:"+pw+"@127.0.0.1:6379/0'''\n")
		var logged bytes.Buffer
		newLog = func(l slog.Leveler) *slog.Logger { return logging.Text(&logged, l) }
		var out, errOut bytes.Buffer
		if code := run([]string{"run", "-config", conf}, &out, &errOut); code != 1 {
			t.Errorf("run with the password in the URL: exit %d, want 1", code)
		}
		if !strings.Contains(logged.String(), "UNITLEASE_EVENT=config_error") {
			t.Errorf("run logged no config_error: %q", logged.String())
		}
		leaks(t, "run's journal entry", logged.String()+out.String()+errOut.String(), pw)
		out.Reset()
		errOut.Reset()
		if code := run([]string{"check", "-config", conf}, &out, &errOut); code != 1 {
			t.Errorf("check with the password in the URL: exit %d, want 1", code)
		}
		leaks(t, "check", out.String()+errOut.String(), pw)

		// A password file: Redis refuses it, accepts it, or never sees it.
		pwFile := file(fmt.Sprintf("pw-%d", i), pw+"\n")
		srv.Command("ACL", "SETUSER", fmt.Sprintf("u%d", i), "on", ">"+pw, "~unitlease:*", "&unitlease:events:*", "+@all")
		for _, c := range []struct {
			name, redis, want string
		}{
			{"refused", fmt.Sprintf("url = %q\nusername = \"nobody-%d\"", srv.URL(), i), "WRONGPASS"},
			{"accepted", fmt.Sprintf("url = %q\nusername = \"u%d\"", srv.URL(), i), "answers"},
			{"nothing listens", fmt.Sprintf("url = \"redis://127.0.0.1:%d/0\"\nusername = \"u%d\"", deadPort, i), "connection refused"},
			{"tls to a plain server", fmt.Sprintf("url = \"rediss://%s/0\"\nusername = \"u%d\"", srv.Addr(), i), "error    redis"},
		} {
			doc := "node = \"n1\"\n[redis]\n" + c.redis + "\npassword_file = \"" + pwFile + "\"\n"
			wg.Go(func() { checkRedis(t, c.name, doc, pw, c.want) })
		}
		doc := fmt.Sprintf("node = \"n1\"\n[redis]\nsentinels = [\"127.0.0.1:%d\"]\nmaster_name = \"m\"\npassword_file = %q\nsentinel_password_file = %q\n", deadPort, pwFile, pwFile)
		wg.Go(func() { checkRedis(t, "sentinels that do not answer", doc, pw, "error    redis") })
	}
	wg.Wait() // the paths that wait on the network run at once
}

// checkRedis runs check's Redis part on a configuration and looks for the
// password in what it prints; want shows the path was the one meant.
func checkRedis(t *testing.T, name, doc, pw, want string) {
	t.Helper()
	cfg, err := config.Parse("u.toml", []byte(doc))
	if err != nil {
		leaks(t, name+": the configuration error", err.Error(), pw)
		return
	}
	var out bytes.Buffer
	c := checker{out: &out}
	ctx, cancel := context.WithTimeout(context.Background(), 5e9)
	defer cancel()
	c.redis(ctx, cfg)
	if !strings.Contains(out.String(), want) {
		t.Errorf("%s: check printed no %q:\n%s", name, want, out.String())
	}
	leaks(t, name+": check", out.String(), pw)
}
