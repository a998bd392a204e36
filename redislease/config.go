package redislease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config says how to reach Redis and how this node writes its records.
type Config struct {
	// URL is redis://[user@]host:port/db or rediss:// for TLS. A password
	// in the URL is refused: use PasswordFile.
	URL string
	// Username for Redis ACLs; overrides one in the URL.
	Username string
	// PasswordFile holds the password (one line). It must not be readable
	// by group or others.
	PasswordFile string
	// CAFile verifies the server (rediss://); empty means the system roots.
	CAFile string
	// CertFile and KeyFile are an optional client certificate.
	CertFile, KeyFile string
	// KeyPrefix starts every key and channel, e.g. "unitlease:".
	KeyPrefix string
	// Node is this node's name, the holder in the records it writes.
	Node string
	// ReplyMax bounds every request, connecting included.
	ReplyMax time.Duration
	// LeaseSpan is written into records and sets the keys' TTL.
	LeaseSpan time.Duration
	// PoolSize is the number of connections; 0 means 16, plenty for a
	// thousand leases renewed every few seconds.
	PoolSize int
}

// ErrConfig reports a configuration the store cannot use; every
// *ConfigError matches it.
var ErrConfig = errors.New("redislease: bad configuration")

// ConfigError is a configuration the store cannot use, as Check and New
// return it.
type ConfigError struct {
	// Key is the configuration key whose value is wrong, without the
	// "redis." table prefix of unitlease.toml: "url", "password_file",
	// "ca_file", "node". It is "" when the message names its keys itself
	// ("cert_file and key_file go together", "password_file /path: mode
	// 0644 ...") or names none ("client certificate: ...").
	Key string
	// Msg is what is wrong, without the key.
	Msg string
}

// Error is "redislease: bad configuration: key: msg", or without "key: "
// when Key is "".
func (e *ConfigError) Error() string {
	if e.Key == "" {
		return ErrConfig.Error() + ": " + e.Msg
	}
	return ErrConfig.Error() + ": " + e.Key + ": " + e.Msg
}

func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// configErr reports a problem with key ("" for none: see ConfigError).
func configErr(key, format string, args ...any) error {
	return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// options turns the configuration into go-redis options.
func (c Config) options() (*redis.Options, error) {
	if err := ValidNode(c.Node); err != nil {
		return nil, configErr("node", "%v", err)
	}
	if c.ReplyMax <= 0 || c.LeaseSpan <= 0 {
		return nil, configErr("", "reply_max %v and lease_span %v must be positive", c.ReplyMax, c.LeaseSpan)
	}
	if err := notReplicated(c.URL); err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(c.URL)
	if err != nil {
		return nil, configErr("url", "%v", redactURLError(err, c.URL))
	}
	if opt.Password != "" {
		return nil, configErr("url", "a password in the URL would show wherever the URL is printed; put it in password_file")
	}
	if c.Username != "" {
		opt.Username = c.Username
	}
	if c.PasswordFile != "" {
		if opt.Password, err = readSecret(c.PasswordFile); err != nil {
			return nil, err
		}
	}
	if err := c.tls(opt); err != nil {
		return nil, err
	}
	opt.Protocol = 2 // no HELLO: one command fewer for the ACL to allow
	opt.DisableIdentity = true
	opt.MaxRetries = -1 // a retried write could apply twice: never retry
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = c.ReplyMax, c.ReplyMax, c.ReplyMax
	opt.ContextTimeoutEnabled = true
	opt.PoolSize = c.PoolSize
	if opt.PoolSize == 0 {
		opt.PoolSize = 16
	}
	opt.PoolTimeout = c.ReplyMax
	// Requests and replies are a few hundred bytes; a pipeline carries at
	// most maxBatch of them. go-redis's defaults (32 KiB per buffer, 128 KiB
	// for pipelines) would hold several megabytes for nothing.
	opt.ReadBufferSize, opt.WriteBufferSize = 4<<10, 4<<10
	opt.PipelineReadBufferSize, opt.PipelineWriteBufferSize = 32<<10, 32<<10
	return opt, nil
}

// notReplicated refuses the URLs of Redis Sentinel and Cluster (go-redis's
// master_name and addr parameters, or a sentinel scheme) with the reason.
// Sentinel's failover promotes a replica that was copied asynchronously:
// it can miss an acknowledged acquisition, and another node can then take
// the same lease while the first still runs the unit. A Cluster spreads
// the keys over masters with the same failover, and pub/sub counts per
// node, which a handoff's "is a peer watching?" relies on.
func notReplicated(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // ParseURL reports it
	}
	q := u.Query()
	switch {
	case strings.Contains(u.Scheme, "sentinel") || q.Has("master_name"):
		return configErr("url", "Redis Sentinel is not supported: its failover promotes an asynchronously copied replica, which can miss an acknowledged write and let two nodes hold one lease; use one Redis with appendonly yes and appendfsync always")
	case q.Has("addr"):
		return configErr("url", "several addresses (Redis Cluster) are not supported: a Cluster fails over to asynchronous replicas too; use one Redis with appendonly yes and appendfsync always")
	}
	return nil
}

func redactURLError(err error, url string) string {
	msg := err.Error()
	if i := strings.Index(url, "@"); i >= 0 {
		msg = strings.ReplaceAll(msg, url[:i], "<credentials>")
	}
	return msg
}

// readSecret reads a password file, refusing one that group or others can
// read.
func readSecret(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", configErr("password_file", "%v", err)
	}
	if perm := st.Mode().Perm(); perm&0o044 != 0 {
		return "", configErr("", "password_file %s: mode %04o lets group or others read it; chmod 0600 %s", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", configErr("password_file", "%v", err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" || strings.ContainsAny(pw, "\r\n") {
		return "", configErr("", "password_file %s: want the password on one line", path)
	}
	return pw, nil
}

func (c Config) tls(opt *redis.Options) error {
	if opt.TLSConfig == nil {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
			return configErr("", "ca_file, cert_file and key_file need a rediss:// url")
		}
		return nil
	}
	opt.TLSConfig.MinVersion = tls.VersionTLS12
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return configErr("ca_file", "%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return configErr("", "ca_file %s: no PEM certificate in it", c.CAFile)
		}
		opt.TLSConfig.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return configErr("", "cert_file and key_file go together")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return configErr("", "client certificate: %v", err)
		}
		opt.TLSConfig.Certificates = []tls.Certificate{cert}
	}
	return nil
}

// Check validates the configuration (reading the password and certificate
// files) without connecting.
func (c Config) Check() error {
	_, err := c.options()
	return err
}
