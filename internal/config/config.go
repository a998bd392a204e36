// Package config loads /etc/unitlease/unitlease.toml: every key optional
// with a default, unknown keys refused, and every error naming the file,
// the line and the key. It checks the values with the rules of the
// packages that use them (policy's timing, redislease's connection,
// unitctl's stop_wait floor) and reads their typed errors; it imports
// nothing that runs.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/unitlease/unitlease/internal/securefile"
	"github.com/unitlease/unitlease/policy"
	"github.com/unitlease/unitlease/redislease"
	"github.com/unitlease/unitlease/unitctl"
)

// DefaultPath is where the daemon and the CLI read their configuration.
const DefaultPath = "/etc/unitlease/unitlease.toml"

// Config is the validated configuration.
type Config struct {
	// Node is this node's name in lease records (default: the host name).
	Node   string
	Redis  Redis
	Timing policy.Timing // resolved: LeaseSpan is set
	// Metrics is the [metrics] table: the Prometheus endpoint.
	Metrics Metrics
	// Path is the file it came from ("" for built-in defaults).
	Path string

	keys policy.Timing               // the timing as written: LeaseSpan 0 when derived
	at   func(key, msg string) error // names the file and the key's line
}

// Redis is the [redis] table.
type Redis struct {
	URL          string `toml:"url"`
	Username     string `toml:"username"`
	PasswordFile string `toml:"password_file"`
	KeyPrefix    string `toml:"key_prefix"`
	CAFile       string `toml:"ca_file"`
	CertFile     string `toml:"cert_file"`
	KeyFile      string `toml:"key_file"`
	PoolSize     int    `toml:"pool_size"`

	// Sentinel: the master the sentinels name, instead of url.
	Sentinels            []string `toml:"sentinels"`
	MasterName           string   `toml:"master_name"`
	DB                   int      `toml:"db"`
	TLS                  bool     `toml:"tls"`
	SentinelUsername     string   `toml:"sentinel_username"`
	SentinelPasswordFile string   `toml:"sentinel_password_file"`
}

// Metrics is the [metrics] table.
type Metrics struct {
	// Enabled serves /metrics at Listen; off by default.
	Enabled bool `toml:"enabled"`
	// Listen is host:port (default DefaultMetricsListen, loopback only).
	// Plain HTTP, without authentication.
	Listen string `toml:"listen"`
}

// DefaultMetricsListen is the metrics endpoint's default address.
const DefaultMetricsListen = "127.0.0.1:9790"

// file is the document as written: durations stay strings until their
// line is known.
type file struct {
	Node    *string `toml:"node"`
	Redis   Redis   `toml:"redis"`
	Metrics Metrics `toml:"metrics"`
	Timing  struct {
		Profile       *string `toml:"profile"`
		Retry         *string `toml:"retry"`
		RenewDeadline *string `toml:"renew_deadline"`
		StopWait      *string `toml:"stop_wait"`
		ReplyMax      *string `toml:"reply_max"`
		PollMin       *string `toml:"poll_min"`
		PollMax       *string `toml:"poll_max"`
		LeaseSpan     *string `toml:"lease_span"`
	} `toml:"timing"`
}

// ErrConfig is wrapped by every error this package returns.
var ErrConfig = errors.New("config: invalid configuration")

// Error names where a configuration went wrong.
type Error struct {
	File string
	Line int // 0 when the key is not in the file (a default)
	Key  string
	Msg  string
}

func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.File, e.Line)
	}
	if e.Key != "" {
		return fmt.Sprintf("%s: %s: %s", where, e.Key, e.Msg)
	}
	return where + ": " + e.Msg
}

func (e *Error) Unwrap() error { return ErrConfig }

// Defaults returns the configuration used when no file exists.
func Defaults() Config {
	c, err := Parse("(defaults)", nil)
	if err != nil {
		panic(err) // the defaults are valid; a test checks it
	}
	return *c
}

// Load reads path. A missing file at DefaultPath means the defaults; a
// missing file anywhere else is an error.
func Load(path string) (*Config, error) {
	// The daemon runs as root and takes its Redis and timing from here:
	// only root may change the file (checked on the opened file).
	data, err := securefile.Read(path, false)
	if errors.Is(err, os.ErrNotExist) && path == DefaultPath {
		c := Defaults()
		return &c, nil
	}
	if err != nil {
		return nil, &Error{File: path, Msg: err.Error()}
	}
	return Parse(path, data)
}

// Parse decodes and validates a document; path is for messages.
func Parse(path string, data []byte) (*Config, error) {
	var f file
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, decodeError(path, err)
	}
	lines := keyLines(data)
	at := func(key, msg string) error { return &Error{File: path, Line: lines[key], Key: key, Msg: msg} }
	c := &Config{Path: path, Redis: f.Redis, Metrics: f.Metrics}
	if err := c.node(f.Node, at); err != nil {
		return nil, err
	}
	if err := c.redisDefaults(at); err != nil {
		return nil, err
	}
	if err := c.timing(f, at); err != nil {
		return nil, err
	}
	if err := c.metrics(at); err != nil {
		return nil, err
	}
	if err := c.RedisConfig().Check(); err != nil {
		return nil, redisError(err, at)
	}
	return c, nil
}

// redisError names the [redis] key a redislease.ConfigError is about, or
// the table when it is about none or several.
func redisError(err error, at func(key, msg string) error) error {
	var ce *redislease.ConfigError
	switch {
	case !errors.As(err, &ce):
		return at("redis", err.Error())
	case ce.Key == "":
		return at("redis", ce.Msg)
	default:
		return at("redis."+ce.Key, ce.Msg)
	}
}

func decodeError(path string, err error) error {
	var de *toml.DecodeError
	if errors.As(err, &de) {
		row, _ := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		var sm *toml.StrictMissingError
		if errors.As(err, &sm) {
			msg = "unknown key"
		}
		key := strings.Join(de.Key(), ".")
		if m := wrongType.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("want %s, not a TOML %s", wanted(key, m[2]), m[1])
		}
		return &Error{File: path, Line: row, Key: key, Msg: msg}
	}
	return &Error{File: path, Msg: err.Error()}
}

// wrongType is go-toml's message for a value of the wrong type, which
// names Go's struct types: what it found, and the Go type it wanted.
var wrongType = regexp.MustCompile(`^cannot decode TOML (\w+) into .* of type (\S+)$`)

// wanted says what a key takes, for a Go type.
func wanted(key, goType string) string {
	switch {
	case key == "timing.profile":
		return "a profile name in quotes: " + strings.Join(ProfileNames(), " or ")
	case strings.HasPrefix(key, "timing.") && goType == "string":
		return `a duration string such as "5s"`
	case goType == "string":
		return "a string in quotes"
	case goType == "[]string":
		return `a list of strings such as ["a", "b"]`
	case goType == "bool":
		return "true or false"
	case strings.HasPrefix(goType, "int") || strings.HasPrefix(goType, "uint"):
		return "an integer"
	}
	return "a " + goType
}

func (c *Config) node(v *string, at func(key, msg string) error) error {
	if v == nil {
		host, err := os.Hostname()
		if err != nil {
			return at("node", "not set, and the host name is unknown: "+err.Error())
		}
		c.Node = host
	} else {
		c.Node = *v
	}
	if err := redislease.ValidNode(c.Node); err != nil {
		return at("node", err.Error())
	}
	return nil
}

func (c *Config) redisDefaults(at func(key, msg string) error) error {
	if len(c.Redis.Sentinels) == 0 {
		c.Redis.Sentinels = nil // sentinels = [] is the default, none
	}
	if c.Redis.URL == "" && len(c.Redis.Sentinels) == 0 {
		c.Redis.URL = "redis://127.0.0.1:6379/0"
	}
	if c.Redis.KeyPrefix == "" {
		c.Redis.KeyPrefix = "unitlease:"
	}
	if c.Redis.PoolSize < 0 || c.Redis.PoolSize > redislease.MaxPoolSize {
		return at("redis.pool_size", fmt.Sprintf("%d is not in 0..%d (0 means 16)", c.Redis.PoolSize, redislease.MaxPoolSize))
	}
	if c.Redis.DB < 0 || c.Redis.DB > redislease.MaxDB {
		return at("redis.db", fmt.Sprintf("%d is not in 0..%d", c.Redis.DB, redislease.MaxDB))
	}
	if strings.ContainsAny(c.Redis.KeyPrefix, "*?[]\\ ") {
		return at("redis.key_prefix", fmt.Sprintf("%q holds a glob character or a space", c.Redis.KeyPrefix))
	}
	return nil
}

// Profiles are the named timings [timing] profile takes; keys set beside
// it override its values. Both work with the packaged unitlease.service's
// watchdog (allowance 4.167 s).
var Profiles = map[string]policy.Timing{
	// The daemon's defaults: lease span 39.246 s, for a Redis and nodes
	// anywhere, a loaded machine included.
	"default": policy.DefaultTiming(),
	// Seconds: lease span 9.186 s, a crash fails over within about
	// 10.2 s and the unit's start. Redis must answer within 500 ms.
	"quick": {
		Retry: time.Second, RenewDeadline: 2 * time.Second, StopWait: 2 * time.Second,
		ReplyMax: 500 * time.Millisecond, PollMin: 500 * time.Millisecond, PollMax: time.Second,
		Allowance: policy.DefaultAllowance,
	},
}

// ProfileNames lists the profiles, sorted.
func ProfileNames() []string {
	names := slices.Collect(maps.Keys(Profiles))
	slices.Sort(names)
	return names
}

func (c *Config) timing(f file, at func(key, msg string) error) error {
	t := policy.DefaultTiming()
	if p := f.Timing.Profile; p != nil {
		var ok bool
		if t, ok = Profiles[*p]; !ok {
			return at("timing.profile", fmt.Sprintf("%q is not a profile: %s", *p, strings.Join(ProfileNames(), " or ")))
		}
	}
	for _, k := range []struct {
		key string
		raw *string
		dst *time.Duration
	}{
		{"retry", f.Timing.Retry, &t.Retry},
		{"renew_deadline", f.Timing.RenewDeadline, &t.RenewDeadline},
		{"stop_wait", f.Timing.StopWait, &t.StopWait},
		{"reply_max", f.Timing.ReplyMax, &t.ReplyMax},
		{"poll_min", f.Timing.PollMin, &t.PollMin},
		{"poll_max", f.Timing.PollMax, &t.PollMax},
		{"lease_span", f.Timing.LeaseSpan, &t.LeaseSpan},
	} {
		if k.raw == nil {
			continue
		}
		d, err := time.ParseDuration(*k.raw)
		if err != nil {
			return at("timing."+k.key, fmt.Sprintf("%q is not a duration like \"5s\" or \"1m30s\"", *k.raw))
		}
		*k.dst = d
	}
	if t.StopWait < unitctl.MinStopWait {
		// The policy would take it, but no unit could be stopped within it.
		return at("timing.stop_wait", fmt.Sprintf("stop_wait %v is below %v: a stop needs room for SIGTERM, then SIGKILL", t.StopWait, unitctl.MinStopWait))
	}
	c.keys, c.at = t, at
	return c.resolve()
}

func (c *Config) metrics(at func(key, msg string) error) error {
	m := &c.Metrics
	if m.Listen == "" {
		m.Listen = DefaultMetricsListen
	}
	host, port, err := net.SplitHostPort(m.Listen)
	if err != nil {
		return at("metrics.listen", fmt.Sprintf("%q is not host:port, like %q", m.Listen, DefaultMetricsListen))
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return at("metrics.listen", fmt.Sprintf("%q: the port %q is not a number in 1..65535", m.Listen, port))
	}
	if host == "" {
		return at("metrics.listen", fmt.Sprintf("%q names no host: write 127.0.0.1:%s for loopback, or 0.0.0.0:%s for every address", m.Listen, port, port))
	}
	return nil
}

// SetAllowance sets the allowance for a daemon that acts late, which
// `run` and `check` compute from unitlease.service as systemd loaded it
// (the file's timing comes with the packaged unit's): a derived lease
// span follows it, and one the file sets must still cover it.
func (c *Config) SetAllowance(a time.Duration) error {
	c.keys.Allowance = a
	return c.resolve()
}

func (c *Config) resolve() error {
	resolved, err := c.keys.Resolved()
	if err != nil {
		var te *policy.TimingError
		if !errors.As(err, &te) {
			return c.at("timing", err.Error())
		}
		return c.at("timing."+te.Key, te.Msg)
	}
	c.Timing = resolved
	return nil
}

// RedisConfig is what redislease.New takes.
func (c *Config) RedisConfig() redislease.Config {
	r := c.Redis
	return redislease.Config{
		URL: r.URL, Username: r.Username, PasswordFile: r.PasswordFile,
		CAFile: r.CAFile, CertFile: r.CertFile, KeyFile: r.KeyFile,
		KeyPrefix: r.KeyPrefix, Node: c.Node, PoolSize: r.PoolSize,
		Sentinels: r.Sentinels, MasterName: r.MasterName, DB: r.DB, TLS: r.TLS,
		SentinelUsername: r.SentinelUsername, SentinelPasswordFile: r.SentinelPasswordFile,
		ReplyMax: c.Timing.ReplyMax, LeaseSpan: c.Timing.LeaseSpan,
	}
}
