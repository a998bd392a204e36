package redislease

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/unitlease/unitlease/internal/securefile"
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

	// Sentinels, when set, are the host:port addresses of the Redis
	// Sentinels that watch MasterName: the store asks them for the
	// master and follows it through a failover. URL must be empty then;
	// DB and TLS say what its path and scheme would. Username,
	// PasswordFile and the TLS files apply to the master.
	Sentinels  []string
	MasterName string
	DB         int
	TLS        bool
	// SentinelUsername and SentinelPasswordFile authenticate to the
	// sentinels (requirepass or an ACL user in sentinel.conf).
	SentinelUsername, SentinelPasswordFile string
}

// Sentinel reports whether the store follows a master through Sentinel.
func (c Config) Sentinel() bool { return len(c.Sentinels) > 0 }

// Bounds of the numeric settings. A pool larger than MaxPoolSize would
// only hold connections idle (a thousand leases need 16); MaxDB is far
// above any Redis's databases setting.
const (
	MaxPoolSize = 1024
	MaxDB       = 65535
)

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
	opt, err := c.master()
	if err != nil {
		return nil, err
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
	if c.PoolSize < 0 || c.PoolSize > MaxPoolSize {
		return nil, configErr("pool_size", "%d is not in 0..%d (0 means 16)", c.PoolSize, MaxPoolSize)
	}
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

// master is the URL's options, or for Sentinel those its keys give.
func (c Config) master() (*redis.Options, error) {
	if !c.Sentinel() {
		if c.MasterName != "" || c.SentinelUsername != "" || c.SentinelPasswordFile != "" {
			return nil, configErr("", "master_name, sentinel_username and sentinel_password_file need sentinels")
		}
		if c.TLS || c.DB != 0 {
			return nil, configErr("", "tls and db go with sentinels; with url, say rediss:// and the database in the URL")
		}
		return parseURL(c.URL)
	}
	switch {
	case c.URL != "":
		return nil, configErr("", "url and sentinels are alternatives: with sentinels, the master is the one they name (master_name)")
	case c.MasterName == "":
		return nil, configErr("master_name", "sentinels need the name of the master they monitor (the NAME of `sentinel monitor NAME host port quorum`)")
	case c.DB < 0 || c.DB > MaxDB:
		return nil, configErr("db", "%d is not in 0..%d", c.DB, MaxDB)
	}
	for _, a := range c.Sentinels {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return nil, configErr("sentinels", "%q is not host:port", a)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, configErr("sentinels", "%q: port %q is not a port number", a, port)
		}
	}
	opt := &redis.Options{DB: c.DB}
	if c.TLS {
		opt.TLSConfig = &tls.Config{}
	}
	return opt, nil
}

// failover is the go-redis failover client's options: opt for the master
// and its replicas, the sentinels' addresses and credentials.
func (c Config) failover(opt *redis.Options) (*redis.FailoverOptions, error) {
	fo := &redis.FailoverOptions{
		MasterName:       c.MasterName,
		SentinelAddrs:    c.Sentinels,
		SentinelUsername: c.SentinelUsername,
		Protocol:         opt.Protocol,
		Username:         opt.Username,
		Password:         opt.Password,
		DB:               opt.DB,
		MaxRetries:       opt.MaxRetries,
		DialTimeout:      opt.DialTimeout,
		ReadTimeout:      opt.ReadTimeout,
		WriteTimeout:     opt.WriteTimeout,
		PoolSize:         opt.PoolSize,
		PoolTimeout:      opt.PoolTimeout,
		TLSConfig:        opt.TLSConfig,
		DisableIdentity:  opt.DisableIdentity,

		ContextTimeoutEnabled:   opt.ContextTimeoutEnabled,
		ReadBufferSize:          opt.ReadBufferSize,
		WriteBufferSize:         opt.WriteBufferSize,
		PipelineReadBufferSize:  opt.PipelineReadBufferSize,
		PipelineWriteBufferSize: opt.PipelineWriteBufferSize,
	}
	if c.SentinelPasswordFile != "" {
		pw, err := readSecretKey("sentinel_password_file", c.SentinelPasswordFile)
		if err != nil {
			return nil, err
		}
		fo.SentinelPassword = pw
	}
	return fo, nil
}

// notReplicated refuses the URLs of Redis Sentinel and Cluster (go-redis's
// master_name and addr parameters, or a sentinel scheme) with the reason.
// Sentinel's failover promotes a replica that was copied asynchronously:
// it can miss an acknowledged acquisition, and another node can then take
// the same lease while the first still runs the unit. A Cluster spreads
// the keys over masters with the same failover, and pub/sub counts per
// node, which a handoff's "is a peer watching?" relies on.
func notReplicated(u *url.URL) error {
	q := u.Query()
	switch {
	case strings.Contains(u.Scheme, "sentinel") || q.Has("master_name"):
		return configErr("url", "Sentinel is not configured through the URL: set sentinels and master_name instead of url")
	case q.Has("addr"):
		return configErr("url", "several addresses (Redis Cluster) are not supported: a Cluster fails over to asynchronous replicas too; use one Redis with appendonly yes and appendfsync always")
	}
	return nil
}

// parseURL reads redis://[user@]host[:port][/db] or rediss://, and
// nothing else: a password (it would show wherever the URL is printed),
// a query option (go-redis would take any of its own, certificate
// verification's off switch among them) or a fragment is refused. No
// message quotes the URL: its user info stays out of every log.
func parseURL(raw string) (*redis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		if strings.Contains(err.Error(), "@") || strings.Contains(raw, "@") && strings.Contains(err.Error(), "invalid") {
			// A message about the part before the host may echo it.
			return nil, configErr("url", "not a URL like redis://user@host:6379/0 (the part before the host is malformed)")
		}
		return nil, configErr("url", "not a URL like redis://user@host:6379/0: %v", err)
	}
	// With user info in the URL, its parts may hold pieces of a password
	// (a '/' or '?' in it ends the host early): name none of them.
	hide := strings.Contains(raw, "@")
	quote := func(s string) string {
		if hide {
			return "(not shown: the URL has user info)"
		}
		return strconv.Quote(s)
	}
	if err := notReplicated(u); err != nil {
		return nil, err
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, configErr("url", "scheme %s is not redis:// or rediss://", quote(u.Scheme))
	}
	if _, set := u.User.Password(); set {
		return nil, configErr("url", "a password in the URL would show wherever the URL is printed; put it in password_file")
	}
	if q := u.Query(); len(q) > 0 || u.RawQuery != "" || u.ForceQuery {
		var names []string
		for k := range q {
			names = append(names, quote(k))
		}
		if len(names) == 0 || hide {
			return nil, configErr("url", "a query (\"?...\") is not supported: the URL takes only redis://[user@]host[:port][/db]; unitlease.toml sets the rest")
		}
		slices.Sort(names)
		if q.Has("skip_verify") {
			return nil, configErr("url", "option \"skip_verify\" is not supported: certificate verification cannot be turned off (ca_file names the certificates to trust)")
		}
		if len(names) == 1 {
			return nil, configErr("url", "option %s is not supported: the URL takes only redis://[user@]host[:port][/db]; unitlease.toml sets the rest", names[0])
		}
		return nil, configErr("url", "options %s are not supported: the URL takes only redis://[user@]host[:port][/db]; unitlease.toml sets the rest", strings.Join(names, ", "))
	}
	if u.Fragment != "" || strings.HasSuffix(raw, "#") {
		return nil, configErr("url", "a fragment (\"#...\") has no meaning here")
	}
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return nil, configErr("url", "no host")
	}
	if port == "" {
		port = "6379"
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return nil, configErr("url", "port %s is not a port number", quote(port))
	}
	opt := &redis.Options{Addr: net.JoinHostPort(host, port), Username: u.User.Username()}
	if path := strings.TrimPrefix(u.Path, "/"); path != "" {
		db, err := strconv.Atoi(path)
		if err != nil || db < 0 || db > MaxDB || strconv.Itoa(db) != path {
			return nil, configErr("url", "the path %s is not a database number", quote(u.Path))
		}
		opt.DB = db
	}
	if u.Scheme == "rediss" {
		opt.TLSConfig = &tls.Config{ServerName: host}
	}
	return opt, nil
}

// Plaintext lists the hosts the configuration reaches over plain TCP
// that are not this machine (not loopback): the password and every record
// would cross the network in clear.
func (c Config) Plaintext() []string {
	var hosts []string
	add := func(host string) {
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			return
		}
		hosts = append(hosts, host)
	}
	if c.Sentinel() {
		if !c.TLS {
			for _, a := range c.Sentinels {
				if h, _, err := net.SplitHostPort(a); err == nil {
					add(h)
				}
			}
			// The master and replicas the sentinels name: other machines,
			// as a rule, whatever the sentinels' addresses.
			hosts = append(hosts, "the master and replicas the sentinels name")
		}
		return hosts
	}
	if u, err := url.Parse(c.URL); err == nil && u.Scheme == "redis" {
		add(u.Hostname())
	}
	return hosts
}

// Where is the Redis the configuration names, for messages: the URL
// without its user, or the master's name and the sentinels.
func (c Config) Where() string {
	if c.Sentinel() {
		return fmt.Sprintf("master %s via sentinels %s", c.MasterName, strings.Join(c.Sentinels, ", "))
	}
	u, err := url.Parse(c.URL)
	if err != nil {
		return "(the url in the configuration)"
	}
	u.User = nil
	return u.String()
}

// readSecret reads a password file, refusing one that group or others can
// read or change, or that another user owns.
func readSecret(path string) (string, error) { return readSecretKey("password_file", path) }

// readSecretKey is readSecret for the file that key names: checked on
// the opened file (internal/securefile): root's (or this user's), not
// readable or writable by group or others.
func readSecretKey(key, path string) (string, error) {
	b, err := securefile.Read(path, true)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return "", configErr(key, "%v", err)
		}
		return "", configErr("", "%s %v", key, err)
	}
	pw := strings.TrimRight(string(b), "\r\n")
	if pw == "" || strings.ContainsAny(pw, "\r\n") {
		return "", configErr("", "%s %s: want the password on one line", key, path)
	}
	return pw, nil
}

func (c Config) tls(opt *redis.Options) error {
	if opt.TLSConfig == nil {
		if c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" {
			if c.Sentinel() {
				return configErr("", "ca_file, cert_file and key_file need tls = true")
			}
			return configErr("", "ca_file, cert_file and key_file need a rediss:// url")
		}
		return nil
	}
	opt.TLSConfig.MinVersion = tls.VersionTLS12
	if c.CAFile != "" {
		// Whoever may write it may add a CA and impersonate Redis.
		pem, err := securefile.Read(c.CAFile, false)
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
		certPEM, err := securefile.Read(c.CertFile, false)
		if err != nil {
			return configErr("cert_file", "%v", err)
		}
		keyPEM, err := securefile.Read(c.KeyFile, true)
		if err != nil {
			return configErr("key_file", "%v", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
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
	opt, err := c.options()
	if err == nil && c.Sentinel() {
		_, err = c.failover(opt)
	}
	return err
}
