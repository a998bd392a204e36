package redislease

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestNoSecretInURLErrors: a password in the URL is refused, and whatever
// else is wrong with the URL, no message shows the user info, however odd
// the password's characters.
func TestNoSecretInURLErrors(t *testing.T) {
	passwords := []string{`hunter2`, `p"a"ss`, `back\slash`, "tab\there", `at@sign`, `per%cent`, `colon:pw`, `sp ace`,
		`slash/pw`, `q?mark`, `hash#pw`, `brace}{`, `%zz`, "nl\nx", `[v6]`}
	tails := []string{"@127.0.0.1:1/0", "@127.0.0.1:abc/0", "@h:1/x", "@h:1/0?skip_verify=true", "@h:1/0?bogus=1",
		"@:1/0", "@h:1/0#frag", "@h:99999/0", "@[::1/0"}
	for _, scheme := range []string{"redis://", "rediss://", "http://", "redis+sentinel://"} {
		for _, pw := range passwords {
			for _, tail := range tails {
				raw := scheme + "user:" + pw + tail
				c := Config{URL: raw, Node: "n", ReplyMax: time.Second, LeaseSpan: time.Minute}
				err := c.Check()
				if err == nil {
					t.Errorf("%q: accepted", raw)
					continue
				}
				msg := err.Error()
				if !errors.Is(err, ErrConfig) || strings.Contains(msg, pw) || strings.Contains(msg, "user:") {
					t.Errorf("%q: %q shows the user info", raw, msg)
				}
			}
		}
	}
}

// TestURLTakesOnlyWhatIsDocumented: redis://[user@]host[:port][/db] or
// rediss://; every query option is refused by name, certificate
// verification above all.
func TestURLTakesOnlyWhatIsDocumented(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{"rediss://h:1/0?skip_verify=true", `url: option "skip_verify" is not supported: certificate verification cannot be turned off`},
		{"redis://h:1/0?max_active_conns=1&conn_max_lifetime=1ns", `url: options "conn_max_lifetime", "max_active_conns" are not supported`},
		{"redis://h:1/0?protocol=3", `url: option "protocol" is not supported`},
		{"redis://h:1/x", `url: the path "/x" is not a database number`},
		{"redis://h:1/0/1", `url: the path "/0/1" is not a database number`},
		{"redis://h:1/-1", `url: the path "/-1" is not a database number`},
		{"redis://h:0/0", `url: port "0" is not a port number`},
		{"redis://h:99999/0", `url: port "99999" is not a port number`},
		{"redis://:1/0", `url: no host`},
		{"redis://h:1/0#x", `url: a fragment ("#...") has no meaning here`},
		{"unix:///run/redis.sock", `url: scheme "unix" is not redis:// or rediss://`},
	} {
		cfg := Config{URL: c.url, Node: "n", ReplyMax: time.Second, LeaseSpan: time.Minute}
		err := cfg.Check()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.url, err, c.want)
		}
	}
	for _, c := range []struct {
		url  string
		addr string
		db   int
		tls  bool
		user string
	}{
		{"redis://h:1/2", "h:1", 2, false, ""},
		{"redis://u@h/0", "h:6379", 0, false, "u"},
		{"rediss://[::1]:7/", "[::1]:7", 0, true, ""},
		{"redis://h", "h:6379", 0, false, ""},
	} {
		cfg := Config{URL: c.url, Node: "n", ReplyMax: time.Second, LeaseSpan: time.Minute}
		opt, err := cfg.options()
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if opt.Addr != c.addr || opt.DB != c.db || (opt.TLSConfig != nil) != c.tls || opt.Username != c.user {
			t.Errorf("%s: addr %s db %d tls %t user %q", c.url, opt.Addr, opt.DB, opt.TLSConfig != nil, opt.Username)
		}
		if c.tls && (opt.TLSConfig.InsecureSkipVerify || opt.TLSConfig.ServerName != "::1") {
			t.Errorf("%s: TLS %+v", c.url, opt.TLSConfig)
		}
	}
	if got := (Config{URL: "redis://admin@10.0.0.5:6380/3"}).Where(); got != "redis://10.0.0.5:6380/3" {
		t.Errorf("Where: %q", got)
	}
}

func TestPlaintext(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "redis://127.0.0.1:6379/0"}, ""},
		{Config{URL: "redis://localhost/0"}, ""},
		{Config{URL: "redis://[::1]:1/0"}, ""},
		{Config{URL: "redis://10.0.0.5:6379/0"}, "10.0.0.5"},
		{Config{URL: "rediss://10.0.0.5:6379/0"}, ""},
		{Config{Sentinels: []string{"127.0.0.1:26379", "redis-b:26379"}, MasterName: "m"}, "redis-b,the master and replicas the sentinels name"},
		{Config{Sentinels: []string{"127.0.0.1:26379"}, MasterName: "m"}, "the master and replicas the sentinels name"},
		{Config{Sentinels: []string{"redis-b:26379"}, MasterName: "m", TLS: true}, ""},
	} {
		if got := strings.Join(c.cfg.Plaintext(), ","); got != c.want {
			t.Errorf("%+v: %q, want %q", c.cfg, got, c.want)
		}
	}
}
