package redislease

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Check's errors are *ConfigError: the key without "redis.", when the
// message is about one key's value, and "" when the sentence names its
// keys itself.
func TestConfigErrorKeys(t *testing.T) {
	dir := t.TempDir()
	loose := filepath.Join(dir, "redis.password")
	if err := os.WriteFile(loose, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(loose, 0o644); err != nil {
		t.Fatal(err)
	}
	base := Config{URL: "redis://127.0.0.1:1/0", Node: "n", ReplyMax: time.Second, LeaseSpan: time.Minute}
	for _, c := range []struct {
		mod       func(*Config)
		key, text string
	}{
		{func(c *Config) { c.Node = "" }, "node",
			`redislease: bad configuration: node: node name "" must be 1 to 253 characters`},
		{func(c *Config) { c.ReplyMax = 0 }, "",
			"redislease: bad configuration: reply_max 0s and lease_span 1m0s must be positive"},
		{func(c *Config) { c.URL = "http://x" }, "url",
			"redislease: bad configuration: url: scheme \"http\" is not redis:// or rediss://"},
		{func(c *Config) { c.URL = "redis://u:hunter2@127.0.0.1:1/0" }, "url",
			"redislease: bad configuration: url: a password in the URL would show wherever the URL is printed; put it in password_file"},
		{func(c *Config) { c.URL = "redis://127.0.0.1:7000/0?addr=127.0.0.1:7001" }, "url",
			"redislease: bad configuration: url: several addresses (Redis Cluster) are not supported: a Cluster fails over to asynchronous replicas too; use one Redis with appendonly yes and appendfsync always"},
		{func(c *Config) { c.PasswordFile = "/nonexistent" }, "password_file",
			"redislease: bad configuration: password_file: open /nonexistent: no such file or directory"},
		{func(c *Config) { c.PasswordFile = loose }, "",
			"redislease: bad configuration: password_file " + loose + ": mode 0644 lets group or others read or change it; chmod 0600 " + loose},
		{func(c *Config) { c.CAFile = "/x" }, "",
			"redislease: bad configuration: ca_file, cert_file and key_file need a rediss:// url"},
		{func(c *Config) { c.URL, c.CAFile = "rediss://127.0.0.1:1/0", "/nonexistent" }, "ca_file",
			"redislease: bad configuration: ca_file: open /nonexistent: no such file or directory"},
		{func(c *Config) { c.URL, c.CAFile = "rediss://127.0.0.1:1/0", loose }, "",
			"redislease: bad configuration: ca_file " + loose + ": no PEM certificate in it"},
		{func(c *Config) { c.URL, c.KeyFile = "rediss://127.0.0.1:1/0", "/x" }, "",
			"redislease: bad configuration: cert_file and key_file go together"},
	} {
		cfg := base
		c.mod(&cfg)
		err := cfg.Check()
		var ce *ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v, want a *ConfigError", cfg, err)
			continue
		}
		if ce.Key != c.key || err.Error() != c.text {
			t.Errorf("%+v:\n got key %q: %v\nwant key %q: %s", cfg, ce.Key, err, c.key, c.text)
		}
	}
}
