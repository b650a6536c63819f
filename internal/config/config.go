// Package config loads the typed configuration shared by the api, worker and
// dlq processes: defaults, then a YAML file, then environment variables, then
// validation. Packages never read the environment themselves; they receive the
// part of Config they need.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/hookline/hookline/internal/redisclient"
	"github.com/hookline/hookline/internal/secret"
)

// Config is the whole configuration of every process.
type Config struct {
	// Env is "development" or "production". Production logs JSON and refuses
	// the development admin token. Default "development".
	Env string `yaml:"env"`
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string `yaml:"log_level"`

	Database Database `yaml:"database"`
	Redis    Redis    `yaml:"redis"`
	AMQP     AMQP     `yaml:"amqp"`
	API      API      `yaml:"api"`
	// MetricsAddr is where worker and dlq serve /metrics, /healthz and
	// /readyz. Default 127.0.0.1:9091 (env METRICS_ADDR).
	MetricsAddr string `yaml:"metrics_addr"`
	// ShutdownGrace is how long a process lets in-flight work finish after
	// SIGTERM before it gives the rest back. Default 25s.
	ShutdownGrace Duration `yaml:"shutdown_grace"`

	Worker    Worker    `yaml:"worker"`
	DLQ       DLQ       `yaml:"dlq"`
	Retention Retention `yaml:"retention"`
	Network   Network   `yaml:"network"`
	Defaults  Defaults  `yaml:"defaults"`
	Security  Security  `yaml:"security"`
	Tracing   Tracing   `yaml:"tracing"`
}

// Security configures the protection of secrets at rest.
type Security struct {
	// SecretKeys are the keys that encrypt webhook signing secrets in the
	// database (AES-256-GCM), as "id:base64" entries of 32-byte keys (env
	// SECRET_KEYS, comma-separated). The first encrypts; the others only
	// decrypt, for secrets not yet re-encrypted after a rotation
	// ("api rotate-secret-key"). Required in production; default none
	// (secrets stored in clear, for tests and development only).
	SecretKeys []string `yaml:"secret_keys"`
}

// DLQ configures how the dlq process runs batch retries.
type DLQ struct {
	// BatchConcurrency is how many batch operations one dlq process runs at
	// once. Default 2.
	BatchConcurrency int `yaml:"batch_concurrency"`
	// BatchConcurrencyPerTenant is how many batch operations of one tenant
	// run at once across every dlq process, so that one tenant's slow
	// batches cannot hold every batch slot while another tenant's wait.
	// Default 1.
	BatchConcurrencyPerTenant int `yaml:"batch_concurrency_per_tenant"`
	// BatchClaimTimeout is how long a running batch may go without a
	// heartbeat from the dlq process that claimed it before another one
	// takes it over (its process died). Default 30s.
	BatchClaimTimeout Duration `yaml:"batch_claim_timeout"`
	// AutoDisable is how the dlq process disables failing endpoints.
	AutoDisable AutoDisable `yaml:"auto_disable"`
}

// AutoDisable configures the automatic disabling of endpoints that keep
// failing (the window itself is a tenant's and a webhook's setting; see
// Defaults.TenantAutoDisable).
type AutoDisable struct {
	// Interval is how often the dlq process looks for webhooks to disable.
	// Default 1m.
	Interval Duration `yaml:"interval"`
	// CircuitReopens disables a webhook whose circuit opened again this
	// many times in a row (each after its half-open probes failed, without
	// closing in between); 0 never. Default 48: about two days of failed
	// probes once the sleep window reached its 1 h cap.
	CircuitReopens int `yaml:"circuit_reopens"`
}

// Retention configures what the dlq process removes, and when (docs/DESIGN.md §14).
type Retention struct {
	// Interval is how often the retention job runs. Default 1h.
	Interval Duration `yaml:"interval"`
	// AttemptsAge is how long attempts and succeeded deliveries are kept.
	// Default 2160h (90 days).
	AttemptsAge Duration `yaml:"attempts_age"`
	// PayloadAge is how long the payload of a fully delivered event is
	// kept. Default 168h (7 days).
	PayloadAge Duration `yaml:"payload_age"`
	// BatchSize bounds the rows one statement removes, so that no statement
	// holds its locks for long. Default 5000.
	BatchSize int `yaml:"batch_size"`
}

// Worker configures the delivery workers.
type Worker struct {
	// Concurrency is the number of deliveries one worker process attempts
	// at once. Default 256. Tenants share them (see docs/SCHEDULING.md): a
	// tenant below its fair share (Concurrency divided by the tenants with
	// work) is let in even when the others hold every slot, so attempts in
	// flight may reach twice Concurrency while endpoints hang.
	Concurrency int `yaml:"concurrency"`
	// Prefetch bounds unacknowledged messages per priority queue. A
	// message holds its place until its attempt ends, so while every slot
	// is held (endpoints that hang until their timeout) only the rest of
	// the prefetch lets the worker take in, and set aside or run, the
	// messages behind them: keep it well above Concurrency. Default 512.
	Prefetch int `yaml:"prefetch"`
	// ConnectTimeout bounds connecting to an endpoint (DNS, TCP and TLS),
	// separately from the attempt's own timeout. Default 10s.
	ConnectTimeout Duration `yaml:"connect_timeout"`
	// MaxConnsPerHost bounds concurrent requests to one endpoint host:port,
	// so that one slow endpoint cannot hold every worker; deliveries over it
	// are postponed, not attempted. Default 5.
	MaxConnsPerHost int `yaml:"max_conns_per_host"`
	// HostQueueWait is how long a delivery waits inside the worker for a
	// free connection to its endpoint host before it is deferred to the
	// host's next estimated free slot. Default 500ms.
	HostQueueWait Duration `yaml:"host_queue_wait"`
}

// Database configures the Postgres system of record.
type Database struct {
	// URL is a postgres:// connection string (env DATABASE_URL).
	// Default postgres://postgres@127.0.0.1:5432/hookline?sslmode=disable.
	URL string `yaml:"url"`
	// MaxConns bounds the pool. Default 32.
	MaxConns int32 `yaml:"max_conns"`
}

// Redis configures the Redis used for breakers, buckets and idempotency.
type Redis struct {
	// Mode is single (one server), cluster (a Redis Cluster) or sentinel
	// (a primary found through Redis Sentinel) (env REDIS_MODE). Default
	// single.
	Mode string `yaml:"mode"`
	// URL is a redis:// URL in go-redis's form for Mode (env REDIS_URL):
	// single, redis://host:port/db (its DB number is used); cluster,
	// redis://host:port?addr=host2:port2&addr=... (any nodes of the
	// cluster); sentinel, redis://sentinel:26379/db?master_name=name&addr=
	// sentinel2:26379 (package redisclient has the details). Default
	// redis://127.0.0.1:6379/0.
	URL string `yaml:"url"`
	// KeyPrefix is prepended to every key; it may not hold "{" or "}",
	// which would make it the hash tag of every key. Default "hookline:".
	KeyPrefix string `yaml:"key_prefix"`
}

// AMQP configures RabbitMQ.
type AMQP struct {
	// URL is an amqp:// URL, or for a cluster a comma-separated list of
	// its nodes' URLs (one vhost and user; a comma in a password written
	// %2C); the vhost is used (env AMQP_URL). Processes spread their
	// connections over the nodes and move to the next when theirs goes.
	// Default amqp://guest:guest@127.0.0.1:5672/.
	URL string `yaml:"url"`
	// Prefix is prepended to every exchange and queue name. Default "hookline".
	Prefix string `yaml:"prefix"`
	// Shards is the number of work queues per priority, 1 to 64 (env
	// AMQP_SHARDS); a delivery's webhook chooses its shard. Default 1,
	// the queue names of a deployment without shards.
	Shards int `yaml:"shards"`
}

// API configures the HTTP API process.
type API struct {
	// Addr is the listen address (env API_ADDR). Default 127.0.0.1:8080.
	Addr string `yaml:"addr"`
	// AdminToken authorises tenant administration (env ADMIN_TOKEN). Required;
	// at least 16 characters in production.
	AdminToken string `yaml:"admin_token"`
	// MaxPayloadBytes is the largest accepted event body. Default 262144.
	MaxPayloadBytes int64 `yaml:"max_payload_bytes"`
	// MaxWebhooksPerTenant bounds the webhooks (not deleted) of one
	// tenant: one publish fans out to all of them inside the shared group
	// commit. Default 1000.
	MaxWebhooksPerTenant int `yaml:"max_webhooks_per_tenant"`
	// RequireHTTPS refuses http:// webhook URLs. Default false.
	RequireHTTPS bool `yaml:"require_https"`
	// PublicURL is the address browsers reach the api at, such as
	// https://hooks.example.com, used in the links of portal sessions (env
	// API_PUBLIC_URL). Default: the scheme and host of the request that
	// asks for the link.
	PublicURL string `yaml:"public_url"`
	// SecretRotationGrace is how long the previous secret keeps signing after
	// a rotation. Default 24h.
	SecretRotationGrace Duration `yaml:"secret_rotation_grace"`
	// MigrateOnStart applies pending migrations when the api starts (env
	// API_MIGRATE_ON_START). Migrations need the owner of the schema: set
	// it false when the api connects under its own role (hookline_api) and
	// run "api migrate" with the owner's DATABASE_URL. Default true.
	MigrateOnStart bool `yaml:"migrate_on_start"`
	// AuthCacheTTL is how long a verified API key is trusted without asking
	// the database again; 0 disables the cache. Default 5s.
	AuthCacheTTL Duration `yaml:"auth_cache_ttl"`
	// ReadHeaderTimeout bounds reading a request's headers. Default 10s.
	ReadHeaderTimeout Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, headers and body, so that
	// a client trickling a body cannot hold a connection and its goroutine
	// for ever. Default 30s: a largest event (api.max_payload_bytes) at
	// under 10 KB/s.
	ReadTimeout Duration `yaml:"read_timeout"`
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request. Default 120s.
	IdleTimeout Duration `yaml:"idle_timeout"`
	// StatementTimeout bounds every SQL statement of the api (Postgres
	// statement_timeout on its connections), so that a slow query cannot
	// hold a connection of the pool for ever. Migrations run without it.
	// Default 30s.
	StatementTimeout Duration `yaml:"statement_timeout"`
	// AuthFailures throttles failed authentications (admin token, API
	// keys, console sign-in) per client address.
	AuthFailures AuthThrottle `yaml:"auth_failures"`
	// TrustedProxies are the CIDRs of reverse proxies whose
	// X-Forwarded-For names the client, for the authentication throttle.
	// Default none: the client is the connecting peer, and X-Forwarded-For,
	// which anyone can send, is ignored.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// PublishQueuePrefetch is how many messages of the publish queue
	// (amqp.prefix + ".publish", docs/PUBLISHING.md) one api process holds
	// and publishes at once; 0 leaves the queue to other api processes.
	// Default 256.
	PublishQueuePrefetch int `yaml:"publish_queue_prefetch"`
	// CommitWindow is how long a publish waits for other events to share
	// its commit (env API_COMMIT_WINDOW): a longer window makes fewer,
	// larger commits and less work for Postgres per event, each publish
	// answered up to that long later. It applies only while publishes come
	// closer together than 3/4 of it on average. 0 to 100ms; 0: no
	// publish waits. Default 5ms (docs/BENCHMARKS.md gives the trade-off).
	CommitWindow Duration `yaml:"commit_window"`
}

// AuthThrottle is a token bucket of failed authentications per client
// address: a client may fail Burst times in a row, then PerMinute times a
// minute; a client with no failure left is answered 429 with Retry-After,
// whatever its credentials, until one is earned back.
type AuthThrottle struct {
	// Burst is how many failures in a row a client may make. Default 10.
	Burst int `yaml:"burst"`
	// PerMinute is how many failures a minute a client earns back.
	// Default 6.
	PerMinute int `yaml:"per_minute"`
}

// Network configures which endpoint addresses deliveries may reach.
type Network struct {
	// AllowPrivateNetworks lets webhooks point at loopback and private ranges
	// (env ALLOW_PRIVATE_NETWORKS). For development and tests only. Default false.
	AllowPrivateNetworks bool `yaml:"allow_private_networks"`
	// AllowCIDRs lists ranges allowed even when private networks are not.
	AllowCIDRs []string `yaml:"allow_cidrs"`
}

// Defaults are the per-tenant and per-webhook settings applied when a create
// request leaves them out.
type Defaults struct {
	TenantRateLimit        RateLimit        `yaml:"tenant_rate_limit"`
	TenantPublishRateLimit PublishRateLimit `yaml:"tenant_publish_rate_limit"`
	WebhookRateLimit       RateLimit        `yaml:"webhook_rate_limit"`
	// TenantAutoDisable is a new tenant's window for disabling its
	// webhooks automatically.
	TenantAutoDisable AutoDisableWindow `yaml:"tenant_auto_disable"`
}

// AutoDisableWindow is how long an endpoint may fail before it is disabled.
type AutoDisableWindow struct {
	// FailingFor: a webhook that has failed without a single success for
	// this long is disabled; 0 never. Default 120h (5 days).
	FailingFor Duration `yaml:"failing_for"`
}

// RateLimit is a token bucket expressed per minute.
type RateLimit struct {
	RequestsPerMinute int `yaml:"requests_per_minute" json:"requests_per_minute"`
	Burst             int `yaml:"burst" json:"burst"`
}

// PublishRateLimit is a token bucket expressed per second.
type PublishRateLimit struct {
	RequestsPerSecond int `yaml:"requests_per_second" json:"requests_per_second"`
	Burst             int `yaml:"burst" json:"burst"`
}

// devSecretKey is the public secret key of config/hookline.yaml, refused in
// production.
const devSecretKey = "ZGV2LW9ubHkta2V5LWRvLW5vdC11c2UtaW4tcHJvZCE=" //nolint:gosec // published on purpose so that Validate can refuse it

// Default returns the configuration used when nothing else is said.
func Default() Config {
	return Config{
		Env:         "development",
		LogLevel:    "info",
		Database:    Database{URL: "postgres://postgres@127.0.0.1:5432/hookline?sslmode=disable", MaxConns: 32},
		Redis:       Redis{Mode: redisclient.Single, URL: "redis://127.0.0.1:6379/0", KeyPrefix: "hookline:"},
		AMQP:        AMQP{URL: "amqp://guest:guest@127.0.0.1:5672/", Prefix: "hookline", Shards: 1}, //nolint:gosec // RabbitMQ's local-only default user
		MetricsAddr: "127.0.0.1:9091",
		Worker: Worker{
			Concurrency:     256,
			Prefetch:        512,
			ConnectTimeout:  Duration(10 * time.Second),
			MaxConnsPerHost: 5,
			HostQueueWait:   Duration(500 * time.Millisecond),
		},
		ShutdownGrace: Duration(25 * time.Second),
		DLQ: DLQ{BatchConcurrency: 2, BatchConcurrencyPerTenant: 1, BatchClaimTimeout: Duration(30 * time.Second),
			AutoDisable: AutoDisable{Interval: Duration(time.Minute), CircuitReopens: 48}},
		Retention: Retention{
			Interval:    Duration(time.Hour),
			AttemptsAge: Duration(90 * 24 * time.Hour),
			PayloadAge:  Duration(7 * 24 * time.Hour),
			BatchSize:   5000,
		},
		API: API{
			Addr:                 "127.0.0.1:8080",
			MaxPayloadBytes:      256 << 10,
			SecretRotationGrace:  Duration(24 * time.Hour),
			MigrateOnStart:       true,
			AuthCacheTTL:         Duration(5 * time.Second),
			MaxWebhooksPerTenant: 1000,
			PublishQueuePrefetch: 256,
			CommitWindow:         Duration(5 * time.Millisecond),
			ReadHeaderTimeout:    Duration(10 * time.Second),
			ReadTimeout:          Duration(30 * time.Second),
			IdleTimeout:          Duration(120 * time.Second),
			StatementTimeout:     Duration(30 * time.Second),
			AuthFailures:         AuthThrottle{Burst: 10, PerMinute: 6},
		},
		Defaults: Defaults{
			TenantRateLimit:        RateLimit{RequestsPerMinute: 1000, Burst: 100},
			TenantPublishRateLimit: PublishRateLimit{RequestsPerSecond: 1000, Burst: 2000},
			WebhookRateLimit:       RateLimit{RequestsPerMinute: 100, Burst: 20},
			TenantAutoDisable:      AutoDisableWindow{FailingFor: Duration(120 * time.Hour)},
		},
		Tracing: defaultTracing(),
	}
}

// Load builds the configuration: defaults, then the YAML file at path (if
// path is not empty), then environment variables looked up with getenv, then
// validation.
func Load(path string, getenv func(string) string) (Config, error) {
	cfg := Default()
	if path != "" {
		raw, err := os.ReadFile(path) //nolint:gosec // the operator names the file to read
		if err != nil {
			return Config{}, fmt.Errorf("read config file: %w", err)
		}
		if err := decodeFile(raw, &cfg); err != nil {
			return Config{}, fmt.Errorf("parse config file %s: %w", path, err)
		}
	}
	if err := cfg.applyEnv(getenv); err != nil {
		return Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// decodeFile decodes one YAML document into cfg, refusing unknown keys. A
// second, non-empty document is refused rather than silently ignored.
func decodeFile(raw []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	err := dec.Decode(&extra)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	case extra.Kind == yaml.DocumentNode && len(extra.Content) > 0 && extra.Content[0].Tag != "!!null":
		return fmt.Errorf("line %d: only one YAML document is allowed", extra.Line)
	}
	return nil
}

func (c *Config) applyEnv(getenv func(string) string) error {
	strs := map[string]*string{
		"DATABASE_URL":   &c.Database.URL,
		"REDIS_URL":      &c.Redis.URL,
		"REDIS_MODE":     &c.Redis.Mode,
		"AMQP_URL":       &c.AMQP.URL,
		"API_ADDR":       &c.API.Addr,
		"METRICS_ADDR":   &c.MetricsAddr,
		"ADMIN_TOKEN":    &c.API.AdminToken,
		"HOOKLINE_ENV":   &c.Env,
		"LOG_LEVEL":      &c.LogLevel,
		"AMQP_PREFIX":    &c.AMQP.Prefix,
		"REDIS_PREFIX":   &c.Redis.KeyPrefix,
		"API_PUBLIC_URL": &c.API.PublicURL,
	}
	for name, dst := range strs {
		if v := getenv(name); v != "" {
			*dst = v
		}
	}
	bools := []struct {
		env, name string
		dst       *bool
	}{
		{"ALLOW_PRIVATE_NETWORKS", "network.allow_private_networks", &c.Network.AllowPrivateNetworks},
		{"API_MIGRATE_ON_START", "api.migrate_on_start", &c.API.MigrateOnStart},
	}
	for _, b := range bools {
		if v := getenv(b.env); v != "" {
			parsed, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("config %s (%s): %q is not a boolean", b.name, b.env, v)
			}
			*b.dst = parsed
		}
	}
	if v := getenv("API_COMMIT_WINDOW"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("config api.commit_window (API_COMMIT_WINDOW): %q is not a duration such as \"5ms\"", v)
		}
		c.API.CommitWindow = Duration(d)
	}
	if v := getenv("AMQP_SHARDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("config amqp.shards (AMQP_SHARDS): %q is not a number", v)
		}
		c.AMQP.Shards = n
	}
	if v := getenv("SECRET_KEYS"); v != "" {
		c.Security.SecretKeys = strings.Split(v, ",")
		for i, k := range c.Security.SecretKeys {
			c.Security.SecretKeys[i] = strings.TrimSpace(k)
		}
	}
	if v := getenv("ALLOW_CIDRS"); v != "" {
		c.Network.AllowCIDRs = strings.Split(v, ",")
		for i, cidr := range c.Network.AllowCIDRs {
			c.Network.AllowCIDRs[i] = strings.TrimSpace(cidr)
		}
	}
	return c.Tracing.applyEnv(getenv)
}

// Validate reports every bad setting, each naming the setting (and its
// environment variable, where there is one), joined with errors.Join.
func (c *Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("config %s: %s", name, fmt.Sprintf(format, args...)))
	}
	if c.Env != "development" && c.Env != "production" {
		bad("env", "must be development or production, got %q", c.Env)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("log_level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	checkURL(bad, "database.url (DATABASE_URL)", c.Database.URL, "postgres", "postgresql")
	c.Redis.validate(bad)
	checkAMQPURLs(bad, c.AMQP.URL)
	if c.AMQP.Shards < 1 || c.AMQP.Shards > 64 {
		bad("amqp.shards (AMQP_SHARDS)", "must be between 1 and 64, got %d", c.AMQP.Shards)
	}
	if c.Database.MaxConns < 2 || c.Database.MaxConns > 1000 {
		bad("database.max_conns", "must be between 2 and 1000, got %d", c.Database.MaxConns)
	}
	checkAddr(bad, "api.addr (API_ADDR)", c.API.Addr)
	checkAddr(bad, "metrics_addr (METRICS_ADDR)", c.MetricsAddr)
	if c.API.AdminToken == "" {
		bad("api.admin_token (ADMIN_TOKEN)", "is required")
	} else if c.Env == "production" && len(c.API.AdminToken) < 16 {
		bad("api.admin_token (ADMIN_TOKEN)", "must be at least 16 characters in production")
	}
	if c.API.MaxPayloadBytes < 1024 || c.API.MaxPayloadBytes > 10<<20 {
		bad("api.max_payload_bytes", "must be between 1024 and 10485760, got %d", c.API.MaxPayloadBytes)
	}
	if c.API.SecretRotationGrace.D() < 0 || c.API.SecretRotationGrace.D() > 30*24*time.Hour {
		bad("api.secret_rotation_grace", "must be between 0 and 720h")
	}
	if c.API.MaxWebhooksPerTenant < 1 || c.API.MaxWebhooksPerTenant > 1_000_000 {
		bad("api.max_webhooks_per_tenant", "must be between 1 and 1000000, got %d", c.API.MaxWebhooksPerTenant)
	}
	if w := c.API.CommitWindow.D(); w < 0 || w > 100*time.Millisecond {
		bad("api.commit_window (API_COMMIT_WINDOW)", "must be between 0 and 100ms, got %s", w)
	}
	if c.API.PublishQueuePrefetch < 0 || c.API.PublishQueuePrefetch > 10_000 {
		bad("api.publish_queue_prefetch", "must be between 0 and 10000, got %d", c.API.PublishQueuePrefetch)
	}
	if c.API.AuthCacheTTL.D() < 0 || c.API.AuthCacheTTL.D() > time.Hour {
		bad("api.auth_cache_ttl", "must be between 0 and 1h")
	}
	if u, err := url.Parse(c.API.PublicURL); c.API.PublicURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") ||
		u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "") {
		bad("api.public_url (API_PUBLIC_URL)", "must be a scheme and host such as https://hooks.example.com")
	}
	c.validateServing(bad)
	if c.ShutdownGrace.D() <= 0 || c.ShutdownGrace.D() > 10*time.Minute {
		bad("shutdown_grace", "must be between 1ms and 10m")
	}
	if c.Worker.Concurrency < 1 || c.Worker.Concurrency > 10_000 {
		bad("worker.concurrency", "must be between 1 and 10000, got %d", c.Worker.Concurrency)
	}
	if c.Worker.Prefetch < 1 || c.Worker.Prefetch > 10_000 {
		bad("worker.prefetch", "must be between 1 and 10000, got %d", c.Worker.Prefetch)
	}
	if c.Worker.ConnectTimeout.D() < 100*time.Millisecond || c.Worker.ConnectTimeout.D() > time.Minute {
		bad("worker.connect_timeout", "must be between 100ms and 1m")
	}
	if c.Worker.MaxConnsPerHost < 1 || c.Worker.MaxConnsPerHost > 1000 {
		bad("worker.max_conns_per_host", "must be between 1 and 1000, got %d", c.Worker.MaxConnsPerHost)
	}
	if c.Worker.HostQueueWait.D() < 0 || c.Worker.HostQueueWait.D() > 30*time.Second {
		bad("worker.host_queue_wait", "must be between 0 and 30s")
	}
	if c.DLQ.BatchConcurrencyPerTenant < 1 || c.DLQ.BatchConcurrencyPerTenant > 100 {
		bad("dlq.batch_concurrency_per_tenant", "must be between 1 and 100, got %d", c.DLQ.BatchConcurrencyPerTenant)
	}
	if c.DLQ.BatchConcurrency < 1 || c.DLQ.BatchConcurrency > 100 {
		bad("dlq.batch_concurrency", "must be between 1 and 100, got %d", c.DLQ.BatchConcurrency)
	}
	if c.DLQ.BatchClaimTimeout.D() < time.Second || c.DLQ.BatchClaimTimeout.D() > time.Hour {
		bad("dlq.batch_claim_timeout", "must be between 1s and 1h")
	}
	c.validateAutoDisable(bad)
	if c.Retention.Interval.D() < time.Second || c.Retention.Interval.D() > 7*24*time.Hour {
		bad("retention.interval", "must be between 1s and 168h")
	}
	if c.Retention.AttemptsAge.D() < 24*time.Hour {
		bad("retention.attempts_age", "must be at least 24h (attempts are partitioned by day)")
	}
	if c.Retention.PayloadAge.D() < time.Hour {
		bad("retention.payload_age", "must be at least 1h")
	}
	if c.Retention.BatchSize < 1 || c.Retention.BatchSize > 100_000 {
		bad("retention.batch_size", "must be between 1 and 100000, got %d", c.Retention.BatchSize)
	}
	if c.AMQP.Prefix == "" {
		bad("amqp.prefix", "must not be empty")
	}
	for i, cidr := range c.Network.AllowCIDRs {
		if _, err := netip.ParsePrefix(strings.TrimSpace(cidr)); err != nil {
			bad(fmt.Sprintf("network.allow_cidrs[%d] (ALLOW_CIDRS)", i), "%q is not a CIDR", cidr)
		}
	}
	if len(c.Security.SecretKeys) == 0 && c.Env == "production" {
		bad("security.secret_keys (SECRET_KEYS)", "at least one key is required in production (id:base64 of 32 random bytes)")
	} else if len(c.Security.SecretKeys) > 0 {
		if _, err := secret.ParseKeys(c.Security.SecretKeys); err != nil {
			bad("security.secret_keys (SECRET_KEYS)", "%s", err.Error())
		}
	}
	for _, k := range c.Security.SecretKeys {
		if c.Env == "production" && strings.HasSuffix(strings.TrimSpace(k), ":"+devSecretKey) {
			bad("security.secret_keys (SECRET_KEYS)", "the public development key of config/hookline.yaml cannot be used in production")
		}
	}
	checkRate(bad, "defaults.tenant_rate_limit", c.Defaults.TenantRateLimit.RequestsPerMinute, c.Defaults.TenantRateLimit.Burst)
	checkRate(bad, "defaults.webhook_rate_limit", c.Defaults.WebhookRateLimit.RequestsPerMinute, c.Defaults.WebhookRateLimit.Burst)
	checkRate(bad, "defaults.tenant_publish_rate_limit", c.Defaults.TenantPublishRateLimit.RequestsPerSecond, c.Defaults.TenantPublishRateLimit.Burst)
	c.Tracing.validate(bad)
	return errors.Join(errs...)
}

// validateAutoDisable checks the automatic disabling of failing endpoints.
func (c *Config) validateAutoDisable(bad func(string, string, ...any)) {
	if d := c.DLQ.AutoDisable.Interval.D(); d < time.Second || d > time.Hour {
		bad("dlq.auto_disable.interval", "must be between 1s and 1h")
	}
	if n := c.DLQ.AutoDisable.CircuitReopens; n < 0 || n > 10_000 {
		bad("dlq.auto_disable.circuit_reopens", "must be between 0 (never) and 10000, got %d", n)
	}
	if d := c.Defaults.TenantAutoDisable.FailingFor.D(); d != 0 && (d < time.Second || d > 90*24*time.Hour) {
		bad("defaults.tenant_auto_disable.failing_for", "must be 0 (never) or between 1s and 2160h")
	}
}

// validateServing checks the api's bounds on connections, statements and
// failed authentications.
func (c *Config) validateServing(bad func(string, string, ...any)) {
	inRange := func(name string, d Duration, lo, hi time.Duration) bool {
		if d.D() < lo || d.D() > hi {
			bad(name, "must be between %s and %s", lo, hi)
			return false
		}
		return true
	}
	inRange("api.read_header_timeout", c.API.ReadHeaderTimeout, time.Second, 5*time.Minute)
	if inRange("api.read_timeout", c.API.ReadTimeout, time.Second, time.Hour) &&
		c.API.ReadTimeout.D() < c.API.ReadHeaderTimeout.D() {
		bad("api.read_timeout", "must not be less than api.read_header_timeout (%s)", c.API.ReadHeaderTimeout.D())
	}
	inRange("api.idle_timeout", c.API.IdleTimeout, time.Second, time.Hour)
	inRange("api.statement_timeout", c.API.StatementTimeout, 100*time.Millisecond, time.Hour)
	if b := c.API.AuthFailures.Burst; b < 1 || b > 10_000 {
		bad("api.auth_failures.burst", "must be between 1 and 10000, got %d", b)
	}
	if p := c.API.AuthFailures.PerMinute; p < 1 || p > 10_000 {
		bad("api.auth_failures.per_minute", "must be between 1 and 10000, got %d", p)
	}
	for i, cidr := range c.API.TrustedProxies {
		if _, err := netip.ParsePrefix(strings.TrimSpace(cidr)); err != nil {
			bad(fmt.Sprintf("api.trusted_proxies[%d]", i), "%q is not a CIDR", cidr)
		}
	}
}

func checkURL(bad func(string, string, ...any), name, raw string, schemes ...string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		bad(name, "is not a valid URL")
		return
	}
	for _, s := range schemes {
		if u.Scheme == s {
			return
		}
	}
	bad(name, "scheme must be one of %s, got %q", strings.Join(schemes, ", "), u.Scheme)
}

// checkAMQPURLs checks each URL of a comma-separated list of a cluster's
// nodes, and that they name one vhost and one user: the processes move
// between the nodes and must find the same queues and permissions on each.
func checkAMQPURLs(bad func(string, string, ...any), raw string) {
	const name = "amqp.url (AMQP_URL)"
	parts := strings.Split(raw, ",")
	if len(parts) == 1 {
		checkURL(bad, name, raw, "amqp", "amqps")
		return
	}
	var first *url.URL
	seen := map[string]int{}
	for i, p := range parts {
		node := fmt.Sprintf("%s node %d", name, i+1)
		p = strings.TrimSpace(p)
		if p == "" {
			bad(node, "is empty (a stray comma?)")
			continue
		}
		u, err := url.Parse(p)
		if err != nil || u.Host == "" || (u.Scheme != "amqp" && u.Scheme != "amqps") {
			checkURL(bad, node, p, "amqp", "amqps")
			continue
		}
		if j, ok := seen[u.Host]; ok {
			bad(node, "%s is node %d again", u.Host, j)
			continue
		}
		seen[u.Host] = i + 1
		if first == nil {
			first = u
			continue
		}
		if vhostOf(u) != vhostOf(first) || u.User.Username() != first.User.Username() {
			bad(node, "must have the vhost and user of the first node (%q, %q), got %q, %q",
				vhostOf(first), first.User.Username(), vhostOf(u), u.User.Username())
		}
	}
}

// vhostOf is the vhost an AMQP URL names: its path without the leading
// slash, "/" when empty.
func vhostOf(u *url.URL) string {
	if v := strings.TrimPrefix(u.Path, "/"); v != "" {
		return v
	}
	return "/"
}

func checkAddr(bad func(string, string, ...any), name, addr string) {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		bad(name, "must be host:port, got %q", addr)
	}
}

func checkRate(bad func(string, string, ...any), name string, rate, burst int) {
	if rate < 1 || rate > 10_000_000 {
		bad(name, "rate must be between 1 and 10000000, got %d", rate)
	}
	if burst < 1 || burst > 10_000_000 {
		bad(name, "burst must be between 1 and 10000000, got %d", burst)
	}
}
