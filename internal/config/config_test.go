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
		{"[redis]\nurl = \"redis://x\"\nbogus = 1\n", "u.toml:3: redis.bogus: unknown key"},
		{"[timing]\n\nretry = \"5x\"\n", `u.toml:3: timing.retry: "5x" is not a duration`},
		{"[timing]\nretry = 5\n", "u.toml:2: timing.retry:"},
		{"node = \"bad name\"\n", `u.toml:1: node: node name "bad name"`},
		{"[timing]\nlease_span = \"30s\"\n", "u.toml:2: timing.lease_span: lease_span 30s is below the safe minimum"},
		{"[timing]\npoll_min = \"20s\"\n", "u.toml:2: timing.poll_min: poll_min 20s is above poll_max 11s"},
		{"[timing]\nstop_wait = \"300ms\"\n", "u.toml:2: timing.stop_wait: stop_wait 300ms is below 1s"},
		{"[redis]\nurl = \"redis://u:pw@h:1/0\"\n", "u.toml:2: redis.url: a password in the URL"},
		{"[redis]\npool_size = -1\n", "u.toml:2: redis.pool_size: -1 is negative"},
		{"node = \n", "u.toml:1:"},
	} {
		_, err := Parse("u.toml", []byte(c.doc))
		if !errors.Is(err, ErrConfig) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s...", c.doc, err, c.want)
		}
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
