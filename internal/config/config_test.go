package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
)

// env returns a getenv backed by a map, so tests never read the process
// environment.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// writeFile writes a config file into a fresh temporary directory.
func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hookline.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// testKey is a well-formed secret key (id:base64 of 32 bytes).
const testKey = "k1:HyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4="

// valid returns a configuration that passes Validate, for tests that break
// one setting at a time.
func valid() config.Config {
	c := config.Default()
	c.API.AdminToken = "a-long-enough-admin-token"
	c.Security.SecretKeys = []string{testKey}
	return c
}

func TestLoadDefaultsWithoutFile(t *testing.T) {
	t.Parallel()

	got, err := config.Load("", env(map[string]string{"ADMIN_TOKEN": "tok"}))
	require.NoError(t, err)

	want := config.Default()
	want.API.AdminToken = "tok"
	require.Equal(t, want, got)

	// Spell the documented defaults out, so that a silent change of
	// Default() is caught here too.
	require.Equal(t, "development", got.Env)
	require.Equal(t, "info", got.LogLevel)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/hookline?sslmode=disable", got.Database.URL)
	require.EqualValues(t, 32, got.Database.MaxConns)
	require.Equal(t, "single", got.Redis.Mode)
	require.Equal(t, "redis://127.0.0.1:6379/0", got.Redis.URL)
	require.Equal(t, "hookline:", got.Redis.KeyPrefix)
	require.Equal(t, 5*time.Millisecond, got.API.CommitWindow.D())
	require.Equal(t, "amqp://guest:guest@127.0.0.1:5672/", got.AMQP.URL)
	require.Equal(t, "hookline", got.AMQP.Prefix)
	require.Equal(t, 1, got.AMQP.Shards)
	require.Equal(t, "127.0.0.1:8080", got.API.Addr)
	require.EqualValues(t, 262144, got.API.MaxPayloadBytes)
	require.False(t, got.API.RequireHTTPS)
	require.Equal(t, 24*time.Hour, got.API.SecretRotationGrace.D())
	require.True(t, got.API.MigrateOnStart)
	require.Equal(t, 5*time.Second, got.API.AuthCacheTTL.D())
	require.Equal(t, 10*time.Second, got.API.ReadHeaderTimeout.D())
	require.Equal(t, 30*time.Second, got.API.ReadTimeout.D())
	require.Equal(t, 120*time.Second, got.API.IdleTimeout.D())
	require.Equal(t, 30*time.Second, got.API.StatementTimeout.D())
	require.Equal(t, config.AuthThrottle{Burst: 10, PerMinute: 6}, got.API.AuthFailures)
	require.Empty(t, got.API.TrustedProxies)
	require.Equal(t, config.Worker{Concurrency: 256, Prefetch: 512, ConnectTimeout: config.Duration(10 * time.Second), MaxConnsPerHost: 5,
		HostQueueWait: config.Duration(500 * time.Millisecond)}, got.Worker)
	require.Equal(t, config.DLQ{BatchConcurrency: 2, BatchConcurrencyPerTenant: 1, BatchClaimTimeout: config.Duration(30 * time.Second),
		AutoDisable: config.AutoDisable{Interval: config.Duration(time.Minute), CircuitReopens: 48}}, got.DLQ)
	require.Equal(t, config.Duration(120*time.Hour), got.Defaults.TenantAutoDisable.FailingFor)
	require.Equal(t, config.Retention{Interval: config.Duration(time.Hour), AttemptsAge: config.Duration(90 * 24 * time.Hour),
		PayloadAge: config.Duration(7 * 24 * time.Hour), BatchSize: 5000}, got.Retention)
	require.Equal(t, "127.0.0.1:9091", got.MetricsAddr)
	require.Equal(t, 25*time.Second, got.ShutdownGrace.D())
	require.False(t, got.Network.AllowPrivateNetworks)
	require.Empty(t, got.Network.AllowCIDRs)
	require.Equal(t, config.RateLimit{RequestsPerMinute: 1000, Burst: 100}, got.Defaults.TenantRateLimit)
	require.Equal(t, config.PublishRateLimit{RequestsPerSecond: 1000, Burst: 2000}, got.Defaults.TenantPublishRateLimit)
	require.Equal(t, config.RateLimit{RequestsPerMinute: 100, Burst: 20}, got.Defaults.WebhookRateLimit)
}

func TestLoadFileValues(t *testing.T) {
	t.Parallel()

	path := writeFile(t, `
env: production
log_level: debug
database:
  url: postgresql://u:p@db.internal:6543/hl
  max_conns: 7
redis:
  mode: cluster
  url: rediss://cache.internal:6380?addr=cache2.internal:6380
  key_prefix: "x:"
amqp:
  url: amqps://mq.internal:5671/vh
  prefix: hx
  shards: 4
api:
  addr: 0.0.0.0:9000
  admin_token: 0123456789abcdef
  max_payload_bytes: 2048
  max_webhooks_per_tenant: 50
  require_https: true
  secret_rotation_grace: 1h30m
  migrate_on_start: false
  auth_cache_ttl: 0s
  read_header_timeout: 2s
  read_timeout: 20s
  idle_timeout: 1m
  statement_timeout: 5s
  auth_failures: {burst: 3, per_minute: 2}
  trusted_proxies: ["10.0.0.0/8"]
  publish_queue_prefetch: 64
  commit_window: 12ms
metrics_addr: ":9999"
shutdown_grace: 90s
worker: {concurrency: 8, prefetch: 9, connect_timeout: 3s, max_conns_per_host: 2, host_queue_wait: 250ms}
dlq: {batch_concurrency: 3, batch_concurrency_per_tenant: 2, batch_claim_timeout: 5s, auto_disable: {interval: 30s, circuit_reopens: 0}}
retention: {interval: 10m, attempts_age: 720h, payload_age: 48h, batch_size: 100}
network:
  allow_private_networks: true
  allow_cidrs: ["10.1.0.0/16", "fd00::/8"]
defaults:
  tenant_rate_limit: {requests_per_minute: 11, burst: 12}
  tenant_publish_rate_limit: {requests_per_second: 13, burst: 14}
  webhook_rate_limit: {requests_per_minute: 15, burst: 16}
  tenant_auto_disable: {failing_for: 24h}
security:
  secret_keys: ["k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "k1:HyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4="]
tracing: {enabled: true, endpoint: "http://otel:4318", traces_endpoint: "http://otel:4318/traces", service_name: hl, sampler: traceidratio, sampler_arg: 0.5}
`)
	got, err := config.Load(path, env(nil))
	require.NoError(t, err)

	want := config.Config{
		Env:           "production",
		LogLevel:      "debug",
		Database:      config.Database{URL: "postgresql://u:p@db.internal:6543/hl", MaxConns: 7},
		Redis:         config.Redis{Mode: "cluster", URL: "rediss://cache.internal:6380?addr=cache2.internal:6380", KeyPrefix: "x:"},
		AMQP:          config.AMQP{URL: "amqps://mq.internal:5671/vh", Prefix: "hx", Shards: 4},
		MetricsAddr:   ":9999",
		ShutdownGrace: config.Duration(90 * time.Second),
		API: config.API{
			Addr:                 "0.0.0.0:9000",
			AdminToken:           "0123456789abcdef",
			MaxPayloadBytes:      2048,
			MaxWebhooksPerTenant: 50,
			RequireHTTPS:         true,
			SecretRotationGrace:  config.Duration(90 * time.Minute),
			MigrateOnStart:       false,
			ReadHeaderTimeout:    config.Duration(2 * time.Second),
			ReadTimeout:          config.Duration(20 * time.Second),
			IdleTimeout:          config.Duration(time.Minute),
			StatementTimeout:     config.Duration(5 * time.Second),
			AuthFailures:         config.AuthThrottle{Burst: 3, PerMinute: 2},
			TrustedProxies:       []string{"10.0.0.0/8"},
			PublishQueuePrefetch: 64,
			CommitWindow:         config.Duration(12 * time.Millisecond),
		},
		Worker: config.Worker{Concurrency: 8, Prefetch: 9, ConnectTimeout: config.Duration(3 * time.Second), MaxConnsPerHost: 2,
			HostQueueWait: config.Duration(250 * time.Millisecond)},
		DLQ: config.DLQ{BatchConcurrency: 3, BatchConcurrencyPerTenant: 2, BatchClaimTimeout: config.Duration(5 * time.Second),
			AutoDisable: config.AutoDisable{Interval: config.Duration(30 * time.Second)}},
		Retention: config.Retention{Interval: config.Duration(10 * time.Minute), AttemptsAge: config.Duration(720 * time.Hour),
			PayloadAge: config.Duration(48 * time.Hour), BatchSize: 100},
		Network: config.Network{AllowPrivateNetworks: true, AllowCIDRs: []string{"10.1.0.0/16", "fd00::/8"}},
		Defaults: config.Defaults{
			TenantRateLimit:        config.RateLimit{RequestsPerMinute: 11, Burst: 12},
			TenantPublishRateLimit: config.PublishRateLimit{RequestsPerSecond: 13, Burst: 14},
			WebhookRateLimit:       config.RateLimit{RequestsPerMinute: 15, Burst: 16},
			TenantAutoDisable:      config.AutoDisableWindow{FailingFor: config.Duration(24 * time.Hour)},
		},
		Security: config.Security{SecretKeys: []string{"k2:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "k1:HyAhIiMkJSYnKCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4="}},
		Tracing: config.Tracing{Enabled: true, Endpoint: "http://otel:4318", TracesEndpoint: "http://otel:4318/traces",
			ServiceName: "hl", Sampler: "traceidratio", SamplerArg: 0.5},
	}
	require.Equal(t, want, got)
}

func TestLoadPartialFileKeepsDefaults(t *testing.T) {
	t.Parallel()

	path := writeFile(t, "api:\n  admin_token: tok\ndatabase:\n  max_conns: 5\n")
	got, err := config.Load(path, env(nil))
	require.NoError(t, err)

	want := config.Default()
	want.API.AdminToken = "tok"
	want.Database.MaxConns = 5
	require.Equal(t, want, got)
}

func TestLoadEmptyFile(t *testing.T) {
	t.Parallel()

	for name, body := range map[string]string{
		"empty":         "",
		"comments only": "# nothing here\n",
		"separator":     "---\n",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := config.Load(writeFile(t, body), env(map[string]string{"ADMIN_TOKEN": "tok"}))
			require.NoError(t, err)
			want := config.Default()
			want.API.AdminToken = "tok"
			require.Equal(t, want, got)
		})
	}
}

func TestLoadEnvOverridesFile(t *testing.T) {
	t.Parallel()

	// The file sets every overridable value to something the environment
	// then replaces.
	const file = `
env: development
log_level: warn
database: {url: "postgres://file@127.0.0.1:1/f"}
redis: {mode: single, url: "redis://file:1/0", key_prefix: "file:"}
amqp: {url: "amqp://file:1/", prefix: file}
api: {addr: "127.0.0.1:1", admin_token: file-token-0123456789, commit_window: 20ms}
metrics_addr: "127.0.0.1:2"
network: {allow_private_networks: false, allow_cidrs: ["10.0.0.0/8"]}
security: {secret_keys: ["file:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="]}
`
	tests := []struct {
		name  string
		key   string
		value string
		got   func(config.Config) any
		want  any
	}{
		{"database url", "DATABASE_URL", "postgres://env@db:5432/e", func(c config.Config) any { return c.Database.URL }, "postgres://env@db:5432/e"},
		{"redis url", "REDIS_URL", "redis://env:6379/2", func(c config.Config) any { return c.Redis.URL }, "redis://env:6379/2"},
		{"redis mode", "REDIS_MODE", "cluster", func(c config.Config) any { return c.Redis.Mode }, "cluster"},
		{"amqp url", "AMQP_URL", "amqp://env:5672/v", func(c config.Config) any { return c.AMQP.URL }, "amqp://env:5672/v"},
		{"api addr", "API_ADDR", ":8081", func(c config.Config) any { return c.API.Addr }, ":8081"},
		{"metrics addr", "METRICS_ADDR", "0.0.0.0:9191", func(c config.Config) any { return c.MetricsAddr }, "0.0.0.0:9191"},
		{"admin token", "ADMIN_TOKEN", "env-token", func(c config.Config) any { return c.API.AdminToken }, "env-token"},
		{"env", "HOOKLINE_ENV", "production", func(c config.Config) any { return c.Env }, "production"},
		{"log level", "LOG_LEVEL", "error", func(c config.Config) any { return c.LogLevel }, "error"},
		{"amqp prefix", "AMQP_PREFIX", "envq", func(c config.Config) any { return c.AMQP.Prefix }, "envq"},
		{"amqp shards", "AMQP_SHARDS", "8", func(c config.Config) any { return c.AMQP.Shards }, 8},
		{"redis prefix", "REDIS_PREFIX", "env:", func(c config.Config) any { return c.Redis.KeyPrefix }, "env:"},
		{"allow private true", "ALLOW_PRIVATE_NETWORKS", "true", func(c config.Config) any { return c.Network.AllowPrivateNetworks }, true},
		{"allow private 1", "ALLOW_PRIVATE_NETWORKS", "1", func(c config.Config) any { return c.Network.AllowPrivateNetworks }, true},
		{"migrate on start", "API_MIGRATE_ON_START", "false", func(c config.Config) any { return c.API.MigrateOnStart }, false},
		{"commit window", "API_COMMIT_WINDOW", "0", func(c config.Config) any { return c.API.CommitWindow.D() }, time.Duration(0)},
		{"allow cidrs", "ALLOW_CIDRS", "192.168.1.0/24, fd00::/8 ,100.64.0.0/10", func(c config.Config) any { return c.Network.AllowCIDRs },
			[]string{"192.168.1.0/24", "fd00::/8", "100.64.0.0/10"}},
		{"secret keys", "SECRET_KEYS", " new:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=, " + testKey, func(c config.Config) any { return c.Security.SecretKeys },
			[]string{"new:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", testKey}},
	}
	path := writeFile(t, file)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			base, err := config.Load(path, env(nil))
			require.NoError(t, err)
			require.NotEqual(t, tt.want, tt.got(base), "the file must set a different value for the test to mean anything")

			got, err := config.Load(path, env(map[string]string{tt.key: tt.value}))
			require.NoError(t, err)
			require.Equal(t, tt.want, tt.got(got))

			// Nothing else moved.
			restore := got
			switch tt.key {
			case "DATABASE_URL":
				restore.Database.URL = base.Database.URL
			case "REDIS_URL":
				restore.Redis.URL = base.Redis.URL
			case "REDIS_MODE":
				restore.Redis.Mode = base.Redis.Mode
			case "AMQP_URL":
				restore.AMQP.URL = base.AMQP.URL
			case "API_ADDR":
				restore.API.Addr = base.API.Addr
			case "METRICS_ADDR":
				restore.MetricsAddr = base.MetricsAddr
			case "ADMIN_TOKEN":
				restore.API.AdminToken = base.API.AdminToken
			case "HOOKLINE_ENV":
				restore.Env = base.Env
			case "LOG_LEVEL":
				restore.LogLevel = base.LogLevel
			case "AMQP_PREFIX":
				restore.AMQP.Prefix = base.AMQP.Prefix
			case "AMQP_SHARDS":
				restore.AMQP.Shards = base.AMQP.Shards
			case "REDIS_PREFIX":
				restore.Redis.KeyPrefix = base.Redis.KeyPrefix
			case "ALLOW_PRIVATE_NETWORKS":
				restore.Network.AllowPrivateNetworks = base.Network.AllowPrivateNetworks
			case "API_MIGRATE_ON_START":
				restore.API.MigrateOnStart = base.API.MigrateOnStart
			case "API_COMMIT_WINDOW":
				restore.API.CommitWindow = base.API.CommitWindow
			case "ALLOW_CIDRS":
				restore.Network.AllowCIDRs = base.Network.AllowCIDRs
			case "SECRET_KEYS":
				restore.Security.SecretKeys = base.Security.SecretKeys
			}
			require.Equal(t, base, restore)
		})
	}
}

func TestLoadEnvFalseOverridesFileTrue(t *testing.T) {
	t.Parallel()

	path := writeFile(t, "api: {admin_token: tok}\nnetwork: {allow_private_networks: true}\n")
	got, err := config.Load(path, env(map[string]string{"ALLOW_PRIVATE_NETWORKS": "false"}))
	require.NoError(t, err)
	require.False(t, got.Network.AllowPrivateNetworks)

	// An empty variable is "not set": the file value stays.
	got, err = config.Load(path, env(map[string]string{"ALLOW_PRIVATE_NETWORKS": ""}))
	require.NoError(t, err)
	require.True(t, got.Network.AllowPrivateNetworks)
}

func TestLoadRefuses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		file    string // "" means no file
		env     map[string]string
		wantErr []string // substrings of the error
	}{
		{name: "unknown top-level key", file: "api: {admin_token: tok}\nlisten: :80\n", wantErr: []string{"field listen not found"}},
		{name: "unknown nested key", file: "api: {admin_token: tok, adress: x}\n", wantErr: []string{"field adress not found"}},
		{name: "misspelt section", file: "databse: {url: postgres://h/d}\n", wantErr: []string{"field databse not found"}},
		{name: "bad duration", file: "api: {admin_token: tok}\nshutdown_grace: soon\n", wantErr: []string{`"soon" is not a duration`}},
		{name: "duration without unit", file: "api: {admin_token: tok}\nshutdown_grace: 25\n", wantErr: []string{`"25" is not a duration`}},
		{name: "duration not a scalar", file: "api: {admin_token: tok, secret_rotation_grace: [1h]}\n", wantErr: []string{"duration must be a string"}},
		{name: "wrong type", file: "api: {admin_token: tok}\ndatabase: {max_conns: many}\n", wantErr: []string{"many"}},
		{name: "not yaml", file: "api: [admin_token: tok\n", wantErr: []string{"parse config file"}},
		{name: "second document", file: "api: {admin_token: tok}\n---\nenv: production\n", wantErr: []string{"only one YAML document"}},
		{name: "second document with unknown key", file: "api: {admin_token: tok}\n---\nnope: 1\n", wantErr: []string{"only one YAML document"}},
		{name: "bad ALLOW_PRIVATE_NETWORKS", env: map[string]string{"ADMIN_TOKEN": "tok", "ALLOW_PRIVATE_NETWORKS": "yes please"},
			wantErr: []string{"network.allow_private_networks (ALLOW_PRIVATE_NETWORKS)", `"yes please" is not a boolean`}},
		{name: "bad AMQP_SHARDS", env: map[string]string{"ADMIN_TOKEN": "tok", "AMQP_SHARDS": "four"},
			wantErr: []string{`config amqp.shards (AMQP_SHARDS): "four" is not a number`}},
		{name: "bad API_COMMIT_WINDOW", env: map[string]string{"ADMIN_TOKEN": "tok", "API_COMMIT_WINDOW": "5"},
			wantErr: []string{`config api.commit_window (API_COMMIT_WINDOW): "5" is not a duration such as "5ms"`}},
		{name: "bad API_MIGRATE_ON_START", env: map[string]string{"ADMIN_TOKEN": "tok", "API_MIGRATE_ON_START": "never"},
			wantErr: []string{"api.migrate_on_start (API_MIGRATE_ON_START)", `"never" is not a boolean`}},
		{name: "bad ALLOW_CIDRS", env: map[string]string{"ADMIN_TOKEN": "tok", "ALLOW_CIDRS": "10.0.0.0/8,10.0.0.300/8"},
			wantErr: []string{"network.allow_cidrs[1] (ALLOW_CIDRS)", `"10.0.0.300/8"`}},
		{name: "bad DATABASE_URL beats good file", file: "api: {admin_token: tok}\n", env: map[string]string{"DATABASE_URL": "mysql://h/d"},
			wantErr: []string{"database.url (DATABASE_URL)"}},
		{name: "no admin token anywhere", wantErr: []string{"api.admin_token (ADMIN_TOKEN)", "is required"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			got, err := config.Load(path, env(tt.env))
			require.Error(t, err)
			for _, want := range tt.wantErr {
				require.ErrorContains(t, err, want)
			}
			require.Equal(t, config.Config{}, got)
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()

	_, err := config.Load(filepath.Join(t.TempDir(), "absent.yaml"), env(map[string]string{"ADMIN_TOKEN": "tok"}))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.ErrorContains(t, err, "read config file")
}

func TestLoadTrailingEmptyDocument(t *testing.T) {
	t.Parallel()

	got, err := config.Load(writeFile(t, "---\napi: {admin_token: tok}\n---\n"), env(nil))
	require.NoError(t, err)
	require.Equal(t, "tok", got.API.AdminToken)
}

func TestValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		mutate  func(*config.Config)
		setting string // "" means valid
	}{
		{"defaults with a token", func(*config.Config) {}, ""},
		{"env production", func(c *config.Config) { c.Env = "production" }, ""},
		{"env staging", func(c *config.Config) { c.Env = "staging" }, "config env:"},
		{"env empty", func(c *config.Config) { c.Env = "" }, "config env:"},
		{"log level debug", func(c *config.Config) { c.LogLevel = "debug" }, ""},
		{"log level warn", func(c *config.Config) { c.LogLevel = "warn" }, ""},
		{"log level error", func(c *config.Config) { c.LogLevel = "error" }, ""},
		{"log level trace", func(c *config.Config) { c.LogLevel = "trace" }, "config log_level:"},
		{"log level upper case", func(c *config.Config) { c.LogLevel = "INFO" }, "config log_level:"},

		{"database postgresql scheme", func(c *config.Config) { c.Database.URL = "postgresql://h:5432/d" }, ""},
		{"database http scheme", func(c *config.Config) { c.Database.URL = "http://h:5432/d" }, "database.url (DATABASE_URL)"},
		{"database no host", func(c *config.Config) { c.Database.URL = "postgres:///d" }, "database.url (DATABASE_URL)"},
		{"database not a url", func(c *config.Config) { c.Database.URL = "host=h dbname=d" }, "database.url (DATABASE_URL)"},
		{"database empty", func(c *config.Config) { c.Database.URL = "" }, "database.url (DATABASE_URL)"},
		{"database unparsable", func(c *config.Config) { c.Database.URL = "postgres://h:port/d" }, "database.url (DATABASE_URL)"},
		{"redis rediss scheme", func(c *config.Config) { c.Redis.URL = "rediss://h:6380/1" }, ""},
		{"redis http scheme", func(c *config.Config) { c.Redis.URL = "http://h:6379/0" }, "redis.url (REDIS_URL)"},
		{"redis empty", func(c *config.Config) { c.Redis.URL = "" }, "redis.url (REDIS_URL)"},
		{"redis mode empty", func(c *config.Config) { c.Redis.Mode = "" }, "redis.mode (REDIS_MODE)"},
		{"redis mode unknown", func(c *config.Config) { c.Redis.Mode = "ring" }, "redis.mode (REDIS_MODE)"},
		{"redis single listing nodes", func(c *config.Config) { c.Redis.URL = "redis://h:7000?addr=h:7001" }, "redis.url (REDIS_URL)"},
		{"redis cluster", func(c *config.Config) {
			c.Redis.Mode, c.Redis.URL = "cluster", "redis://h:7000?addr=h:7001&addr=h:7002"
		}, ""},
		{"redis cluster of one seed", func(c *config.Config) { c.Redis.Mode, c.Redis.URL = "cluster", "rediss://u:p@h:7000" }, ""},
		{"redis cluster database 1", func(c *config.Config) { c.Redis.Mode, c.Redis.URL = "cluster", "redis://h:7000/1" }, "redis.url (REDIS_URL)"},
		{"redis cluster naming a master", func(c *config.Config) {
			c.Redis.Mode, c.Redis.URL = "cluster", "redis://h:7000?master_name=m"
		}, "redis.url (REDIS_URL)"},
		{"redis sentinel", func(c *config.Config) {
			c.Redis.Mode, c.Redis.URL = "sentinel", "redis://h:26379/2?master_name=m&addr=h:26380"
		}, ""},
		{"redis sentinel without master name", func(c *config.Config) {
			c.Redis.Mode, c.Redis.URL = "sentinel", "redis://h:26379?addr=h:26380"
		}, "redis.url (REDIS_URL)"},
		{"redis sentinel unknown option", func(c *config.Config) {
			c.Redis.Mode, c.Redis.URL = "sentinel", "redis://h:26379?master_name=m&primary=x"
		}, "redis.url (REDIS_URL)"},
		{"redis prefix with a brace", func(c *config.Config) { c.Redis.KeyPrefix = "{hl}:" }, "redis.key_prefix (REDIS_PREFIX)"},
		{"redis prefix empty", func(c *config.Config) { c.Redis.KeyPrefix = "" }, ""},
		{"amqps scheme", func(c *config.Config) { c.AMQP.URL = "amqps://h:5671/" }, ""},
		{"amqp redis scheme", func(c *config.Config) { c.AMQP.URL = "redis://h:5672/" }, "amqp.url (AMQP_URL)"},
		{"amqp no host", func(c *config.Config) { c.AMQP.URL = "amqp:///" }, "amqp.url (AMQP_URL)"},
		{"amqp cluster", func(c *config.Config) {
			c.AMQP.URL = "amqp://u:p@a:5672/vh, amqp://u:p@b:5672/vh,amqps://u:p@c:5671/vh"
		}, ""},
		{"amqp cluster default vhost both ways", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672,amqp://b:5672/" }, ""},
		{"amqp cluster comma in password", func(c *config.Config) { c.AMQP.URL = "amqp://u:p%2Cq@a:5672/,amqp://u:p%2Cq@b:5672/" }, ""},
		{"amqp cluster stray comma", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672/,,amqp://b:5672/" }, "amqp.url (AMQP_URL) node 2: is empty"},
		{"amqp cluster trailing comma", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672/,amqp://b:5672/," }, "amqp.url (AMQP_URL) node 3: is empty"},
		{"amqp cluster bad scheme", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672/,http://b:5672/" }, "amqp.url (AMQP_URL) node 2: scheme"},
		{"amqp cluster no host", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672/,amqp:///" }, "amqp.url (AMQP_URL) node 2: is not a valid URL"},
		{"amqp cluster node twice", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672/,amqp://b:5672/,amqp://a:5672/" }, "node 3: a:5672 is node 1 again"},
		{"amqp cluster other vhost", func(c *config.Config) { c.AMQP.URL = "amqp://a:5672/x,amqp://b:5672/y" }, `node 2: must have the vhost and user of the first node ("x", ""), got "y", ""`},
		{"amqp cluster other user", func(c *config.Config) { c.AMQP.URL = "amqp://u:p@a:5672/,amqp://v:p@b:5672/" }, `node 2: must have the vhost and user of the first node ("/", "u"), got "/", "v"`},
		{"amqp shards 1", func(c *config.Config) { c.AMQP.Shards = 1 }, ""},
		{"amqp shards 64", func(c *config.Config) { c.AMQP.Shards = 64 }, ""},
		{"amqp shards 0", func(c *config.Config) { c.AMQP.Shards = 0 }, "amqp.shards (AMQP_SHARDS)"},
		{"amqp shards 65", func(c *config.Config) { c.AMQP.Shards = 65 }, "amqp.shards (AMQP_SHARDS)"},

		{"max conns lowest", func(c *config.Config) { c.Database.MaxConns = 2 }, ""},
		{"max conns highest", func(c *config.Config) { c.Database.MaxConns = 1000 }, ""},
		{"max conns too low", func(c *config.Config) { c.Database.MaxConns = 1 }, "database.max_conns"},
		{"max conns too high", func(c *config.Config) { c.Database.MaxConns = 1001 }, "database.max_conns"},

		{"api addr port only", func(c *config.Config) { c.API.Addr = ":8080" }, ""},
		{"api addr no port", func(c *config.Config) { c.API.Addr = "127.0.0.1" }, "api.addr (API_ADDR)"},
		{"api addr empty port", func(c *config.Config) { c.API.Addr = "127.0.0.1:" }, "api.addr (API_ADDR)"},
		{"api addr empty", func(c *config.Config) { c.API.Addr = "" }, "api.addr (API_ADDR)"},
		{"metrics addr no port", func(c *config.Config) { c.MetricsAddr = "localhost" }, "metrics_addr (METRICS_ADDR)"},

		{"admin token missing", func(c *config.Config) { c.API.AdminToken = "" }, "api.admin_token (ADMIN_TOKEN)"},
		{"admin token short in development", func(c *config.Config) { c.API.AdminToken = "x" }, ""},
		{"admin token 15 in production", func(c *config.Config) {
			c.Env = "production"
			c.API.AdminToken = "dev-admin-token" // the committed development token
		}, "api.admin_token (ADMIN_TOKEN)"},
		{"admin token 16 in production", func(c *config.Config) {
			c.Env = "production"
			c.API.AdminToken = strings.Repeat("k", 16)
		}, ""},
		{"admin token missing in production", func(c *config.Config) {
			c.Env = "production"
			c.API.AdminToken = ""
		}, "api.admin_token (ADMIN_TOKEN)"},

		{"payload lowest", func(c *config.Config) { c.API.MaxPayloadBytes = 1024 }, ""},
		{"payload highest", func(c *config.Config) { c.API.MaxPayloadBytes = 10 << 20 }, ""},
		{"payload too small", func(c *config.Config) { c.API.MaxPayloadBytes = 1023 }, "api.max_payload_bytes"},
		{"payload too big", func(c *config.Config) { c.API.MaxPayloadBytes = 10<<20 + 1 }, "api.max_payload_bytes"},
		{"rotation grace zero", func(c *config.Config) { c.API.SecretRotationGrace = 0 }, ""},
		{"rotation grace 720h", func(c *config.Config) { c.API.SecretRotationGrace = config.Duration(720 * time.Hour) }, ""},
		{"worker concurrency 0", func(c *config.Config) { c.Worker.Concurrency = 0 }, "worker.concurrency"},
		{"commit window 0", func(c *config.Config) { c.API.CommitWindow = 0 }, ""},
		{"commit window 100ms", func(c *config.Config) { c.API.CommitWindow = config.Duration(100 * time.Millisecond) }, ""},
		{"commit window negative", func(c *config.Config) { c.API.CommitWindow = config.Duration(-time.Millisecond) }, "api.commit_window (API_COMMIT_WINDOW)"},
		{"commit window over 100ms", func(c *config.Config) { c.API.CommitWindow = config.Duration(101 * time.Millisecond) }, "api.commit_window (API_COMMIT_WINDOW)"},
		{"publish queue prefetch negative", func(c *config.Config) { c.API.PublishQueuePrefetch = -1 }, "api.publish_queue_prefetch"},
		{"publish queue prefetch too large", func(c *config.Config) { c.API.PublishQueuePrefetch = 10_001 }, "api.publish_queue_prefetch"},
		{"worker prefetch 0", func(c *config.Config) { c.Worker.Prefetch = 0 }, "worker.prefetch"},
		{"worker connect timeout tiny", func(c *config.Config) { c.Worker.ConnectTimeout = config.Duration(time.Millisecond) }, "worker.connect_timeout"},
		{"worker conns per host 0", func(c *config.Config) { c.Worker.MaxConnsPerHost = 0 }, "worker.max_conns_per_host"},
		{"batch concurrency 0", func(c *config.Config) { c.DLQ.BatchConcurrency = 0 }, "dlq.batch_concurrency"},
		{"batch concurrency per tenant 0", func(c *config.Config) { c.DLQ.BatchConcurrencyPerTenant = 0 }, "dlq.batch_concurrency_per_tenant"},
		{"host queue wait negative", func(c *config.Config) { c.Worker.HostQueueWait = -1 }, "worker.host_queue_wait"},
		{"host queue wait 1m", func(c *config.Config) { c.Worker.HostQueueWait = config.Duration(time.Minute) }, "worker.host_queue_wait"},
		{"batch claim timeout tiny", func(c *config.Config) { c.DLQ.BatchClaimTimeout = config.Duration(time.Millisecond) }, "dlq.batch_claim_timeout"},
		{"retention interval 0", func(c *config.Config) { c.Retention.Interval = 0 }, "retention.interval"},
		{"attempts age under a day", func(c *config.Config) { c.Retention.AttemptsAge = config.Duration(time.Hour) }, "retention.attempts_age"},
		{"payload age tiny", func(c *config.Config) { c.Retention.PayloadAge = config.Duration(time.Minute) }, "retention.payload_age"},
		{"retention batch 0", func(c *config.Config) { c.Retention.BatchSize = 0 }, "retention.batch_size"},
		{"secret keys missing in production", func(c *config.Config) {
			c.Env = "production"
			c.Security.SecretKeys = nil
		}, "security.secret_keys (SECRET_KEYS)"},
		{"secret keys optional in development", func(c *config.Config) { c.Security.SecretKeys = nil }, ""},
		{"secret key malformed", func(c *config.Config) { c.Security.SecretKeys = []string{"k1:short"} }, "security.secret_keys (SECRET_KEYS)"},
		{"auth cache ttl negative", func(c *config.Config) { c.API.AuthCacheTTL = config.Duration(-time.Second) }, "api.auth_cache_ttl"},
		{"auth cache ttl too long", func(c *config.Config) { c.API.AuthCacheTTL = config.Duration(2 * time.Hour) }, "api.auth_cache_ttl"},
		{"rotation grace negative", func(c *config.Config) { c.API.SecretRotationGrace = config.Duration(-time.Second) }, "api.secret_rotation_grace"},
		{"rotation grace too long", func(c *config.Config) { c.API.SecretRotationGrace = config.Duration(721 * time.Hour) }, "api.secret_rotation_grace"},
		{"shutdown grace 10m", func(c *config.Config) { c.ShutdownGrace = config.Duration(10 * time.Minute) }, ""},
		{"shutdown grace zero", func(c *config.Config) { c.ShutdownGrace = 0 }, "shutdown_grace"},
		{"shutdown grace negative", func(c *config.Config) { c.ShutdownGrace = config.Duration(-time.Second) }, "shutdown_grace"},
		{"shutdown grace too long", func(c *config.Config) { c.ShutdownGrace = config.Duration(10*time.Minute + 1) }, "shutdown_grace"},
		{"amqp prefix empty", func(c *config.Config) { c.AMQP.Prefix = "" }, "amqp.prefix"},

		{"read header timeout zero", func(c *config.Config) { c.API.ReadHeaderTimeout = 0 }, "api.read_header_timeout"},
		{"read timeout zero", func(c *config.Config) { c.API.ReadTimeout = 0 }, "api.read_timeout"},
		{"read timeout below header timeout", func(c *config.Config) {
			c.API.ReadHeaderTimeout, c.API.ReadTimeout = config.Duration(20*time.Second), config.Duration(10*time.Second)
		}, "api.read_timeout"},
		{"read timeout 1h", func(c *config.Config) { c.API.ReadTimeout = config.Duration(time.Hour) }, ""},
		{"idle timeout zero", func(c *config.Config) { c.API.IdleTimeout = 0 }, "api.idle_timeout"},
		{"idle timeout too long", func(c *config.Config) { c.API.IdleTimeout = config.Duration(2 * time.Hour) }, "api.idle_timeout"},
		{"statement timeout zero", func(c *config.Config) { c.API.StatementTimeout = 0 }, "api.statement_timeout"},
		{"statement timeout 100ms", func(c *config.Config) { c.API.StatementTimeout = config.Duration(100 * time.Millisecond) }, ""},
		{"auth failure burst zero", func(c *config.Config) { c.API.AuthFailures.Burst = 0 }, "api.auth_failures.burst"},
		{"auth failure rate zero", func(c *config.Config) { c.API.AuthFailures.PerMinute = 0 }, "api.auth_failures.per_minute"},
		{"trusted proxies", func(c *config.Config) { c.API.TrustedProxies = []string{"10.0.0.0/8", "fd00::/8"} }, ""},
		{"trusted proxy bare address", func(c *config.Config) { c.API.TrustedProxies = []string{"10.0.0.1"} }, "api.trusted_proxies[0]"},

		{"cidr v4 and v6", func(c *config.Config) { c.Network.AllowCIDRs = []string{"10.0.0.0/8", " fd00::/8 "} }, ""},
		{"cidr bare address", func(c *config.Config) { c.Network.AllowCIDRs = []string{"10.0.0.1"} }, "network.allow_cidrs[0]"},
		{"cidr bad mask", func(c *config.Config) { c.Network.AllowCIDRs = []string{"10.0.0.0/8", "10.0.0.0/33"} }, "network.allow_cidrs[1]"},
		{"cidr empty", func(c *config.Config) { c.Network.AllowCIDRs = []string{""} }, "network.allow_cidrs[0]"},

		{"tenant rate zero", func(c *config.Config) { c.Defaults.TenantRateLimit.RequestsPerMinute = 0 }, "defaults.tenant_rate_limit"},
		{"tenant rate too high", func(c *config.Config) { c.Defaults.TenantRateLimit.RequestsPerMinute = 10_000_001 }, "defaults.tenant_rate_limit"},
		{"tenant rate highest", func(c *config.Config) { c.Defaults.TenantRateLimit.RequestsPerMinute = 10_000_000 }, ""},
		{"tenant burst zero", func(c *config.Config) { c.Defaults.TenantRateLimit.Burst = 0 }, "defaults.tenant_rate_limit"},
		{"tenant burst too high", func(c *config.Config) { c.Defaults.TenantRateLimit.Burst = 10_000_001 }, "defaults.tenant_rate_limit"},
		{"webhook rate negative", func(c *config.Config) { c.Defaults.WebhookRateLimit.RequestsPerMinute = -1 }, "defaults.webhook_rate_limit"},
		{"webhook burst zero", func(c *config.Config) { c.Defaults.WebhookRateLimit.Burst = 0 }, "defaults.webhook_rate_limit"},
		{"publish rate zero", func(c *config.Config) { c.Defaults.TenantPublishRateLimit.RequestsPerSecond = 0 }, "defaults.tenant_publish_rate_limit"},
		{"publish burst too high", func(c *config.Config) { c.Defaults.TenantPublishRateLimit.Burst = 10_000_001 }, "defaults.tenant_publish_rate_limit"},

		{"auto-disable never", func(c *config.Config) { c.Defaults.TenantAutoDisable.FailingFor = 0 }, ""},
		{"auto-disable window too short", func(c *config.Config) {
			c.Defaults.TenantAutoDisable.FailingFor = config.Duration(500 * time.Millisecond)
		}, "defaults.tenant_auto_disable.failing_for"},
		{"auto-disable window too long", func(c *config.Config) {
			c.Defaults.TenantAutoDisable.FailingFor = config.Duration(91 * 24 * time.Hour)
		}, "defaults.tenant_auto_disable.failing_for"},
		{"auto-disable interval zero", func(c *config.Config) { c.DLQ.AutoDisable.Interval = 0 }, "dlq.auto_disable.interval"},
		{"circuit reopens never", func(c *config.Config) { c.DLQ.AutoDisable.CircuitReopens = 0 }, ""},
		{"circuit reopens negative", func(c *config.Config) { c.DLQ.AutoDisable.CircuitReopens = -1 }, "dlq.auto_disable.circuit_reopens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if tt.setting == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorContains(t, err, tt.setting)
			// Exactly one setting is broken, so exactly one line is reported.
			require.Len(t, strings.Split(err.Error(), "\n"), 1, "got %q", err.Error())
		})
	}
}

func TestValidateReportsEveryBadSetting(t *testing.T) {
	t.Parallel()

	c := valid()
	c.Env = "prod"
	c.Redis.URL = "memcached://h:1"
	c.API.AdminToken = ""
	c.Database.MaxConns = 0
	err := c.Validate()
	require.Error(t, err)
	for _, want := range []string{"config env:", "redis.url (REDIS_URL)", "api.admin_token (ADMIN_TOKEN)", "database.max_conns"} {
		require.ErrorContains(t, err, want)
	}
	require.Len(t, strings.Split(err.Error(), "\n"), 4)
}

func TestCommittedDevConfigLoads(t *testing.T) {
	t.Parallel()

	got, err := config.Load("../../config/hookline.yaml", env(nil))
	require.NoError(t, err)

	// The dev file spells out the defaults, plus a development admin token
	// and private networks for a local receiver.
	want := config.Default()
	want.API.AdminToken = "dev-admin-token"
	want.Network.AllowPrivateNetworks = true
	want.Network.AllowCIDRs = []string{}
	want.API.TrustedProxies = []string{}
	want.Security.SecretKeys = []string{"dev:ZGV2LW9ubHkta2V5LWRvLW5vdC11c2UtaW4tcHJvZCE="}
	require.Equal(t, want, got)

	// Neither the development token nor the development secret key passes
	// in production.
	_, err = config.Load("../../config/hookline.yaml", env(map[string]string{"HOOKLINE_ENV": "production"}))
	require.ErrorContains(t, err, "api.admin_token (ADMIN_TOKEN)")
	require.ErrorContains(t, err, "security.secret_keys (SECRET_KEYS)")
}

func TestRedisErrorsSayWhatIsWrong(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct{ mode, url, want string }{
		{"ring", "redis://h:6379/0", `config redis.mode (REDIS_MODE): must be single, cluster or sentinel, got "ring"`},
		{"sentinel", "redis://h:26379", "config redis.url (REDIS_URL): mode sentinel needs master_name=<name> in the url's query: the name the sentinels know the primary by"},
		{"cluster", "redis://h:7000/4", `config redis.url (REDIS_URL): url selects database "4", but a Redis Cluster has only database 0`},
		{"single", "redis://h:7000?addr=h:7001", "config redis.url (REDIS_URL): url lists more nodes (addr=), which mode single does not use: is mode cluster or sentinel meant?"},
	} {
		c := valid()
		c.Redis.Mode, c.Redis.URL = tc.mode, tc.url
		require.EqualError(t, c.Validate(), tc.want)
	}
}
