package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaults(t *testing.T) {
	c := Defaults()
	host, _ := os.Hostname()
	if c.Node != host || c.Redis.URL != "redis://127.0.0.1:6379/0" || c.Redis.KeyPrefix != "unitlease:" {
		t.Fatalf("%+v", c)
	}
	if c.Timing.Retry != 5*time.Second || c.Timing.RenewDeadline != 20*time.Second || c.Timing.StopWait != 10*time.Second ||
		c.Timing.ReplyMax != 2*time.Second || c.Timing.PollMin != 5*time.Second || c.Timing.PollMax != 11*time.Second {
		t.Fatalf("timing defaults %+v", c.Timing)
	}
	if c.Timing.LeaseSpan != c.Timing.SafeMinimum() || c.Timing.LeaseSpan <= 35*time.Second {
		t.Fatalf("lease span %v, safe minimum %v", c.Timing.LeaseSpan, c.Timing.SafeMinimum())
	}
}

func TestFullFile(t *testing.T) {
	doc := `node = "node-a"
[redis]
url = "rediss://10.0.0.1:6380/2"
username = "unitlease"
key_prefix = "ha:"
pool_size = 4
[timing]
retry = "1s"
renew_deadline = "4s"
stop_wait = "2s"
reply_max = "500ms"
poll_min = "1s"
poll_max = "2s"
lease_span = "1m"
`
	c, err := Parse("u.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != "node-a" || c.Redis.URL != "rediss://10.0.0.1:6380/2" || c.Redis.KeyPrefix != "ha:" || c.Redis.PoolSize != 4 ||
		c.Timing.Retry != time.Second || c.Timing.LeaseSpan != time.Minute || c.Timing.ReplyMax != 500*time.Millisecond {
		t.Fatalf("%+v", c)
	}
	rc := c.RedisConfig()
	if rc.Node != "node-a" || rc.ReplyMax != 500*time.Millisecond || rc.LeaseSpan != time.Minute || rc.Username != "unitlease" {
		t.Fatalf("%+v", rc)
	}
}

func TestErrorsNameFileLineAndKey(t *testing.T) {
	for _, c := range []struct {
		doc, want string
	}{
		{"node = \"a\"\n[timing]\nretri = \"5s\"\n", "u.toml:3: timing.retri: unknown key"},
		{"[timing]\nprofile = \"fast\"\n", `u.toml:2: timing.profile: "fast" is not a profile: default or quick`},
		{"[timing]\nprofile = \"quick\"\nreply_max = \"1s\"\n", "u.toml:3: timing.reply_max: reply_max 1s must be below retry 1s"},
		{"[redis]\nurl = \"redis://x\"\nbogus = 1\n", "u.toml:3: redis.bogus: unknown key"},
		{"[timing]\n\nretry = \"5x\"\n", `u.toml:3: timing.retry: "5x" is not a duration`},
		{"[timing]\nretry = 5\n", `u.toml:2: timing.retry: want a duration string such as "5s", not a TOML integer`},
		{"node = 1\n", "u.toml:1: node: want a string in quotes, not a TOML integer"},
		{"[redis]\nsentinels = \"h:1\"\n", `u.toml:2: redis.sentinels: want a list of strings such as ["a", "b"], not a TOML string`},
		{"[redis]\npool_size = \"8\"\n", "u.toml:2: redis.pool_size: want an integer, not a TOML string"},
		{"[redis]\ntls = \"yes\"\n", "u.toml:2: redis.tls: want true or false, not a TOML string"},
		{"node = \"bad name\"\n", `u.toml:1: node: node name "bad name"`},
		{"[timing]\nlease_span = \"30s\"\n", "u.toml:2: timing.lease_span: lease_span 30s is below the safe minimum"},
		{"[timing]\npoll_min = \"20s\"\n", "u.toml:2: timing.poll_min: poll_min 20s is above poll_max 11s"},
		{"[timing]\nstop_wait = \"300ms\"\n", "u.toml:2: timing.stop_wait: stop_wait 300ms is below 1s"},
		{"[redis]\nurl = \"redis://u:pw@h:1/0\"\n", "u.toml:2: redis.url: a password in the URL"},
		{"[redis]\npool_size = -1\n", "u.toml:2: redis.pool_size: -1 is not in 0..1024"},
		{"[redis]\npool_size = 10000000000\n", "u.toml:2: redis.pool_size: 10000000000 is not in 0..1024"},
		{"[redis]\npool_size = 2147483647\n", "u.toml:2: redis.pool_size: 2147483647 is not in 0..1024"},
		{"[redis]\nsentinels = [\"h:1\"]\nmaster_name = \"m\"\ndb = 70000\n", "u.toml:4: redis.db: 70000 is not in 0..65535"},
		{"[redis]\nsentinels = [\"127.0.0.1:26379\"]\n\nmaster_name = \"\"\n", "u.toml:4: redis.master_name: sentinels need the name of the master"},
		{"[redis]\nurl = \"redis://h/0\"\nsentinels = [\"127.0.0.1:26379\"]\nmaster_name = \"m\"\n", "u.toml:1: redis: url and sentinels are alternatives"},
		{"[redis]\nsentinels = [\"h\"]\nmaster_name = \"m\"\n", `u.toml:2: redis.sentinels: "h" is not host:port`},
		{"node = \n", "u.toml:1:"},
		{"[metrics]\nenabled = \"yes\"\n", "u.toml:2: metrics.enabled: want true or false, not a TOML string"},
		{"[metrics]\nenabled = true\nlisten = \":9790\"\n", `u.toml:3: metrics.listen: ":9790" names no host`},
		{"[metrics]\nlisten = \"localhost\"\n", `u.toml:2: metrics.listen: "localhost" is not host:port`},
		{"[metrics]\nlisten = \"127.0.0.1:http\"\n", `u.toml:2: metrics.listen: "127.0.0.1:http": the port "http" is not a number in 1..65535`},
		{"[metrics]\nlisten = \"127.0.0.1:0\"\n", `u.toml:2: metrics.listen: "127.0.0.1:0": the port "0" is not a number`},
		{"[metrics]\nport = 9\n", "u.toml:2: metrics.port: unknown key"},
	} {
		_, err := Parse("u.toml", []byte(c.doc))
		if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.doc, err, c.want)
		}
	}
}

// TestMetricsDefaults: off, and loopback when turned on.
func TestMetricsDefaults(t *testing.T) {
	if m := Defaults().Metrics; m.Enabled || m.Listen != "127.0.0.1:9790" {
		t.Errorf("default metrics %+v, want off at 127.0.0.1:9790", m)
	}
	c, err := Parse("u.toml", []byte("[metrics]\nenabled = true\n"))
	if err != nil || !c.Metrics.Enabled || c.Metrics.Listen != DefaultMetricsListen {
		t.Errorf("enabled alone: %+v, %v", c, err)
	}
	c, err = Parse("u.toml", []byte("[metrics]\nenabled = true\nlisten = \"[::1]:9100\"\n"))
	if err != nil || c.Metrics.Listen != "[::1]:9100" {
		t.Errorf("an IPv6 address: %v", err)
	}
}

func TestLoad(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "none.toml")); !errors.Is(err, ErrConfig) {
		t.Fatalf("missing explicit file: %v", err)
	}
	p := filepath.Join(t.TempDir(), "u.toml")
	os.WriteFile(p, []byte("node = \"n1\"\n"), 0o640)
	c, err := Load(p)
	if err != nil || c.Node != "n1" || c.Path != p {
		t.Fatalf("%+v %v", c, err)
	}
}

// The key and line of an error found after decoding come from the typed
// errors of policy and redislease: the key the timing sentence is about,
// the redis key a "key: msg" is about, and the [redis] table for a
// sentence that names its keys itself.
func TestErrorKeysAndLines(t *testing.T) {
	loose := filepath.Join(t.TempDir(), "redis.password")
	if err := os.WriteFile(loose, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		doc  string
		line int
		key  string
		msg  string // a prefix
	}{
		// retry is set, but reply_max is what the sentence is about; it is
		// not in the file, so there is no line.
		{"[timing]\nretry = \"1s\"\n", 0, "timing.reply_max", "reply_max 2s must be below retry 1s, so that"},
		{"[timing]\nretry = \"1s\"\nreply_max = \"1s\"\n", 3, "timing.reply_max", "reply_max 1s must be below retry 1s"},
		{"[timing]\nrenew_deadline = \"1s\"\n", 0, "timing.reply_max", "reply_max 2s must be below renew_deadline 1s"},
		{"[timing]\npoll_min = \"20s\"\npoll_max = \"10s\"\n", 2, "timing.poll_min", "poll_min 20s is above poll_max 10s"},
		{"[timing]\npoll_max = \"1s\"\n", 0, "timing.poll_min", "poll_min 5s is above poll_max 1s"},
		{"node = \"n\"\n\n[timing]\nretry = \"6s\"\nlease_span = \"39.246s\"\n", 5, "timing.lease_span", "lease_span 39.246s is below the safe minimum 40.248s (retry 6s"},
		{"[timing]\nstop_wait = \"0s\"\n", 2, "timing.stop_wait", "stop_wait 0s is below 1s"},
		{"[timing]\nretry = \"0s\"\n", 2, "timing.retry", "retry 0s must be positive"},
		{"[timing]\npoll_max = \"61m\"\n", 2, "timing.poll_max", "poll_max 1h1m0s is above the limit of 1h0m0s"},
		// A rediss-only key with redis:// names three keys: the table.
		{"node = \"n\"\n[redis]\nurl = \"redis://h:1/0\"\nca_file = \"/x\"\n", 2, "redis", "ca_file, cert_file and key_file need a rediss:// url"},
		{"[redis]\npassword_file = \"" + loose + "\"\n", 1, "redis", "password_file " + loose + ": mode 0644 lets group or others read or change it; chmod 0600 " + loose},
		{"[redis]\nurl = \"rediss://h:1/0\"\ncert_file = \"/x\"\n", 1, "redis", "cert_file and key_file go together"},
		{"[redis]\nurl = \"rediss://h:1/0\"\ncert_file = \"/x\"\nkey_file = \"/y\"\n", 3, "redis.cert_file", "open /x:"},
		{"[redis]\n\npassword_file = \"/nonexistent\"\n", 3, "redis.password_file", "open /nonexistent:"},
		{"[redis]\nurl = \"rediss://h:1/0\"\nca_file = \"/nonexistent\"\n", 3, "redis.ca_file", "open /nonexistent:"},
		{"[redis]\nurl = \"redis://u:pw@h:1/0\"\n", 2, "redis.url", "a password in the URL would show"},
		{"[redis]\nurl = \"http://x\"\n", 2, "redis.url", `scheme "http" is not redis:// or rediss://`},
	} {
		_, err := Parse("u.toml", []byte(c.doc))
		var ce *Error
		if !errors.As(err, &ce) {
			t.Errorf("%q: %v, want a *Error", c.doc, err)
			continue
		}
		if ce.File != "u.toml" || ce.Line != c.line || ce.Key != c.key || !strings.HasPrefix(ce.Msg, c.msg) {
			t.Errorf("%q:\n got %#v\nwant line %d key %s msg %s...", c.doc, *ce, c.line, c.key, c.msg)
		}
	}
}

func TestSentinelKeys(t *testing.T) {
	doc := "node = \"n1\"\n[redis]\nsentinels = [\"10.0.0.1:26379\", \"10.0.0.2:26379\"]\nmaster_name = \"unitlease\"\ndb = 2\n" +
		"sentinel_username = \"watch\"\n"
	c, err := Parse("u.toml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RedisConfig()
	if rc.URL != "" || len(rc.Sentinels) != 2 || rc.Sentinels[1] != "10.0.0.2:26379" || rc.MasterName != "unitlease" ||
		rc.DB != 2 || rc.TLS || rc.SentinelUsername != "watch" || !rc.Sentinel() {
		t.Fatalf("%+v", rc)
	}
}

// TestLoadRefusesAFileOthersMayChange: the daemon runs as root and takes
// its Redis and timing from the file: a file group or others may write,
// or that another user owns, is refused, checked on the opened file.
func TestLoadRefusesAFileOthersMayChange(t *testing.T) {
	p := filepath.Join(t.TempDir(), "u.toml")
	if err := os.WriteFile(p, []byte("node = \"n1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "mode 0666 lets group or others change it") {
		t.Fatalf("world-writable: %v", err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatalf("0644: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(p); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "owned by uid 65534, not root") {
			t.Fatalf("owned by nobody: %v", err)
		}
	}
}

// TestNoSecretInTheConfigError: the message `run` logs as config_error
// (and check prints) for a URL with a password never holds it, whatever
// its characters.
func TestNoSecretInTheConfigError(t *testing.T) {
	for _, pw := range []string{`hunter2`, `p"a"ss`, `back\\slash`, `at@sign`, `sp ace`, `%zz`, `per%25cent`} {
		doc := "[redis]\nurl = \"redis://user:" + pw + "@h:1/0?skip_verify=true\"\n"
		_, err := Parse("u.toml", []byte(doc))
		if err == nil {
			t.Fatalf("%q accepted", doc)
		}
		plain := strings.ReplaceAll(pw, `\\`, `\`)
		if strings.Contains(err.Error(), plain) || strings.Contains(err.Error(), "user:") {
			t.Errorf("%q: %v shows the password", doc, err)
		}
	}
}

// TestProfiles: a named profile gives every timing key at once, with the
// lease span the README states; a key beside it overrides it.
func TestProfiles(t *testing.T) {
	for _, c := range []struct {
		doc  string
		span time.Duration
		poll time.Duration
	}{
		{"[timing]\nprofile = \"default\"\n", 39246 * time.Millisecond, 11 * time.Second},
		{"[timing]\nprofile = \"quick\"\n", 9186 * time.Millisecond, time.Second},
		{"[timing]\nprofile = \"quick\"\npoll_max = \"2s\"\n", 9186 * time.Millisecond, 2 * time.Second},
	} {
		cfg, err := Parse("u.toml", []byte("node = \"n1\"\n"+c.doc))
		if err != nil {
			t.Fatalf("%q: %v", c.doc, err)
		}
		if cfg.Timing.LeaseSpan != c.span || cfg.Timing.PollMax != c.poll {
			t.Errorf("%q: lease span %v, poll_max %v; want %v, %v", c.doc, cfg.Timing.LeaseSpan, cfg.Timing.PollMax, c.span, c.poll)
		}
	}
}
