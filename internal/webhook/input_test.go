package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/netguard"
)

// fakeResolver answers from a map; names it does not know fail to resolve.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, errors.New("no such host")
	}
	out := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		out[i] = netip.MustParseAddr(a)
	}
	return out, nil
}

var testResolver = fakeResolver{
	"hooks.example.com": {"93.184.216.34", "2606:2800:220:1::1"},
	"internal.example":  {"10.0.0.5"},
	"rebind.example":    {"93.184.216.34", "127.0.0.1"},
	"metadata.example":  {"169.254.169.254"},
}

func testRules() Rules {
	return Rules{
		Network:          netguard.Policy{},
		Resolver:         testResolver,
		DefaultRateLimit: RateLimit{RequestsPerMinute: 120, Burst: 7},
	}
}

func ptr[T any](v T) *T { return &v }

func validCreate() Input {
	return Input{URL: ptr("https://hooks.example.com/in"), Events: []string{"order.*"}}
}

func requireField(t *testing.T, err error, field string) {
	t.Helper()
	var fe *fielderr.Error
	require.ErrorAs(t, err, &fe, "got %v", err)
	require.Equal(t, field, fe.Field, "message: %s", fe.Message)
	require.NotEmpty(t, fe.Message)
}

func TestBuildCreateFillsDefaults(t *testing.T) {
	t.Parallel()

	w, err := testRules().Build(context.Background(), Webhook{}, validCreate(), true)
	require.NoError(t, err)

	require.Equal(t, "https://hooks.example.com/in", w.URL)
	require.Equal(t, []string{"order.*"}, w.Events)
	require.True(t, w.Active)
	require.Equal(t, RetryConfig{
		MaxAttempts:         5,
		BaseDelayMS:         1000,
		MaxDelayMS:          300_000,
		BackoffMultiplier:   2,
		TimeoutMS:           30_000,
		TimeoutGrowthFactor: 1.5,
		ScheduleMS:          []int64{},
	}, w.RetryConfig)
	require.Equal(t, BreakerConfig{
		Enabled:                  true,
		ErrorThresholdPercentage: 60,
		MinimumThroughput:        20,
		WindowSizeMS:             60_000,
		SleepWindowMS:            30_000,
		HalfOpenMaxCalls:         5,
		HalfOpenSuccessThreshold: 60,
	}, w.CircuitBreakerConfig)
	require.Equal(t, RateLimit{RequestsPerMinute: 120, Burst: 7}, w.RateLimit)
	require.Equal(t, OrderingNone, w.OrderingGuarantee)
	require.True(t, w.TracePropagation)
	require.Equal(t, Headers{}, w.Headers)
	require.JSONEq(t, `{}`, string(w.Metadata))
	require.Empty(t, w.PreviousSecret)
	require.Nil(t, w.PreviousSecretExpiresAt)

	// A fresh secret was generated, and it is a valid one.
	require.True(t, strings.HasPrefix(w.Secret, SecretPrefix), w.Secret)
	key, err := DecodeSecret(w.Secret)
	require.NoError(t, err)
	require.Len(t, key, 32)

	w2, err := testRules().Build(context.Background(), Webhook{}, validCreate(), true)
	require.NoError(t, err)
	require.NotEqual(t, w.Secret, w2.Secret, "every webhook gets its own secret")

	// Defaults are values, not shared state.
	w.RetryConfig.ScheduleMS = append(w.RetryConfig.ScheduleMS, 1)
	w.Headers["X-A"] = "1"
	require.Equal(t, DefaultRetryConfig(), w2.RetryConfig)
	require.Empty(t, w2.Headers)
}

func TestBuildCreateKeepsGivenValues(t *testing.T) {
	t.Parallel()

	in := Input{
		URL:               ptr("  https://hooks.example.com:8443/in?x=1  "),
		Events:            []string{"order.*", "user.created", "order.*"},
		Secret:            ptr(standardWebhooksSecret),
		Active:            ptr(false),
		OrderingGuarantee: ptr(OrderingStrict),
		Headers:           ptr(map[string]string{"x-api-key": "k\tv", "Authorization": "Bearer t"}),
		Metadata:          json.RawMessage(`{ "team": "ops",  "tags": [1, 2] }`),
		VerifyURL:         ptr(false),
		TracePropagation:  ptr(false),
		RetryConfig:       &RetryInput{MaxAttempts: ptr(9), ScheduleMS: ptr([]int64{0, 500, 60_000})},
		CircuitBreakerConfig: &BreakerInput{
			Enabled:       ptr(false),
			SleepWindowMS: ptr(int64(5000)),
		},
		RateLimit: &RateLimitInput{Burst: ptr(3)},
	}
	w, err := testRules().Build(context.Background(), Webhook{}, in, true)
	require.NoError(t, err)

	require.Equal(t, "https://hooks.example.com:8443/in?x=1", w.URL)
	require.Equal(t, []string{"order.*", "user.created"}, w.Events)
	require.Equal(t, standardWebhooksSecret, w.Secret)
	require.False(t, w.Active)
	require.Equal(t, OrderingStrict, w.OrderingGuarantee)
	require.False(t, w.TracePropagation)
	require.Equal(t, Headers{"X-Api-Key": "k\tv", "Authorization": "Bearer t"}, w.Headers)
	require.Equal(t, `{"team":"ops","tags":[1,2]}`, string(w.Metadata))

	wantRetry := DefaultRetryConfig()
	wantRetry.MaxAttempts = 9
	wantRetry.ScheduleMS = []int64{0, 500, 60_000}
	require.Equal(t, wantRetry, w.RetryConfig)
	wantBreaker := DefaultBreakerConfig()
	wantBreaker.Enabled = false
	wantBreaker.SleepWindowMS = 5000
	require.Equal(t, wantBreaker, w.CircuitBreakerConfig)
	require.Equal(t, RateLimit{RequestsPerMinute: 120, Burst: 3}, w.RateLimit)

	// The schedule was copied, not aliased.
	(*in.RetryConfig.ScheduleMS)[0] = 99
	require.Equal(t, int64(0), w.RetryConfig.ScheduleMS[0])
}

func TestBuildMetadataKeepsNumbersExact(t *testing.T) {
	t.Parallel()

	in := validCreate()
	in.Metadata = json.RawMessage(`{"account_id": 12345678901234567890, "amount": 1.10, "big": 1e400, "html": "<a&b>"}`)
	w, err := testRules().Build(context.Background(), Webhook{}, in, true)
	require.NoError(t, err)
	require.Equal(t, `{"account_id":12345678901234567890,"amount":1.10,"big":1e400,"html":"<a&b>"}`, string(w.Metadata))
}

func TestBuildURLAccepted(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		rules func(*Rules)
		url   string
		want  string
	}{
		{name: "https", url: "https://hooks.example.com/in", want: "https://hooks.example.com/in"},
		{name: "http allowed by default", url: "http://hooks.example.com/in", want: "http://hooks.example.com/in"},
		{name: "upper-case scheme", url: "HTTPS://hooks.example.com/in", want: "https://hooks.example.com/in"},
		{name: "public literal", url: "https://93.184.216.34/x", want: "https://93.184.216.34/x"},
		{name: "public v6 literal", url: "https://[2606:4700::1]:8443/x", want: "https://[2606:4700::1]:8443/x"},
		{name: "unresolvable name accepted", url: "https://not-yet.example/hook", want: "https://not-yet.example/hook"},
		{name: "highest port", url: "https://hooks.example.com:65535/", want: "https://hooks.example.com:65535/"},
		{name: "exactly 2048 characters", url: "https://hooks.example.com/" + strings.Repeat("a", 2048-26),
			want: "https://hooks.example.com/" + strings.Repeat("a", 2048-26)},
		{name: "https when required", rules: func(r *Rules) { r.RequireHTTPS = true }, url: "https://hooks.example.com/", want: "https://hooks.example.com/"},
		{name: "loopback with private allowed", rules: func(r *Rules) { r.Network.AllowPrivate = true }, url: "http://127.0.0.1:9000/in", want: "http://127.0.0.1:9000/in"},
		{name: "localhost with private allowed", rules: func(r *Rules) { r.Network.AllowPrivate = true }, url: "http://localhost:9000/in", want: "http://localhost:9000/in"},
		{name: "allow list", rules: func(r *Rules) { r.Network.Allow = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")} },
			url: "https://internal.example/in", want: "https://internal.example/in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rules := testRules()
			if tt.rules != nil {
				tt.rules(&rules)
			}
			in := validCreate()
			in.URL = ptr(tt.url)
			w, err := rules.Build(context.Background(), Webhook{}, in, true)
			require.NoError(t, err)
			require.Equal(t, tt.want, w.URL)
		})
	}
}

func TestBuildCreateRefuses(t *testing.T) {
	t.Parallel()

	headers := func(n int) *map[string]string {
		h := make(map[string]string, n)
		for i := range n {
			h[fmt.Sprintf("X-H%d", i)] = "v"
		}
		return &h
	}
	url := func(u string) func(*Input) { return func(in *Input) { in.URL = ptr(u) } }
	header := func(name, value string) func(*Input) {
		return func(in *Input) { in.Headers = &map[string]string{"X-Ok": "1", name: value} }
	}
	metadata := func(raw string) func(*Input) { return func(in *Input) { in.Metadata = json.RawMessage(raw) } }

	tests := []struct {
		name         string
		requireHTTPS bool
		mutate       func(*Input)
		field        string
	}{
		{"url missing", false, func(in *Input) { in.URL = nil }, "url"},
		{"url empty", false, url(""), "url"},
		{"url blank", false, url("   "), "url"},
		{"url too long", false, url("https://hooks.example.com/" + strings.Repeat("a", 2048-25)), "url"},
		{"url unparsable", false, url("https://hooks.example.com:port/"), "url"},
		{"url control character", false, url("https://hooks.example.com/\x7f"), "url"},
		{"url ftp", false, url("ftp://hooks.example.com/in"), "url"},
		{"url no scheme", false, url("hooks.example.com/in"), "url"},
		{"url javascript", false, url("javascript:alert(1)"), "url"},
		{"url http when https required", true, url("http://hooks.example.com/in"), "url"},
		{"url no host", false, url("https:///in"), "url"},
		{"url port only", false, url("https://:443/in"), "url"},
		{"url opaque", false, url("https:hooks.example.com"), "url"},
		{"url user and password", false, url("https://user:pass@hooks.example.com/in"), "url"},
		{"url user only", false, url("https://user@hooks.example.com/in"), "url"},
		{"url fragment", false, url("https://hooks.example.com/in#part"), "url"},
		{"url port zero", false, url("https://hooks.example.com:0/in"), "url"},
		{"url port too big", false, url("https://hooks.example.com:65536/in"), "url"},
		{"url loopback", false, url("http://127.0.0.1:8080/in"), "url"},
		{"url loopback v6", false, url("http://[::1]:8080/in"), "url"},
		{"url mapped loopback", false, url("http://[::ffff:127.0.0.1]/in"), "url"},
		{"url localhost", false, url("http://localhost:8080/in"), "url"},
		{"url sub.localhost", false, url("http://api.localhost/in"), "url"},
		{"url private", false, url("http://10.0.0.1/in"), "url"},
		{"url metadata", false, url("http://169.254.169.254/latest/meta-data/"), "url"},
		{"url link-local v6 with zone", false, url("http://[fe80::1%25eth0]/in"), "url"},
		{"url name resolving private", false, url("https://internal.example/in"), "url"},
		{"url name resolving metadata", false, url("https://metadata.example/in"), "url"},
		{"url name with one loopback address", false, url("https://rebind.example/in"), "url"},

		{"events missing", false, func(in *Input) { in.Events = nil }, "events"},
		{"events empty", false, func(in *Input) { in.Events = []string{} }, "events"},
		{"events bad character", false, func(in *Input) { in.Events = []string{"order created"} }, "events"},
		{"events empty segment", false, func(in *Input) { in.Events = []string{"order..created"} }, "events"},
		{"events too many", false, func(in *Input) { in.Events = slices.Repeat([]string{"a"}, 101) }, "events"},

		{"secret no prefix", false, func(in *Input) { in.Secret = ptr("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") }, "secret"},
		{"secret bad base64", false, func(in *Input) { in.Secret = ptr("whsec_%%%%") }, "secret"},
		{"secret too short", false, func(in *Input) { in.Secret = ptr("whsec_c2hvcnQ=") }, "secret"},
		{"secret empty", false, func(in *Input) { in.Secret = ptr("") }, "secret"},

		{"ordering unknown", false, func(in *Input) { in.OrderingGuarantee = ptr("fifo") }, "ordering_guarantee"},
		{"ordering empty", false, func(in *Input) { in.OrderingGuarantee = ptr("") }, "ordering_guarantee"},
		{"ordering wrong case", false, func(in *Input) { in.OrderingGuarantee = ptr("Strict") }, "ordering_guarantee"},

		{"headers too many", false, func(in *Input) { in.Headers = headers(21) }, "headers"},
		{"header empty name", false, header("", "v"), "headers."},
		{"header name with space", false, header("X Foo", "v"), "headers.X Foo"},
		{"header name with colon", false, header("X-Foo:", "v"), "headers.X-Foo:"},
		{"header name non-ascii", false, header("X-Föo", "v"), "headers.X-Föo"},
		{"header name too long", false, header("X-"+strings.Repeat("a", 255), "v"), "headers.X-" + strings.Repeat("a", 255)},
		{"header value CR", false, header("X-Foo", "a\rb"), "headers.X-Foo"},
		{"header value LF", false, header("X-Foo", "a\nInjected: 1"), "headers.X-Foo"},
		{"header value CRLF", false, header("X-Foo", "a\r\n"), "headers.X-Foo"},
		{"header value NUL", false, header("X-Foo", "a\x00b"), "headers.X-Foo"},
		{"header value DEL", false, header("X-Foo", "a\x7fb"), "headers.X-Foo"},
		{"header value escape", false, header("X-Foo", "a\x1bb"), "headers.X-Foo"},
		{"header value too long", false, header("X-Foo", strings.Repeat("v", 4097)), "headers.X-Foo"},
		{"reserved Content-Type", false, header("Content-Type", "text/plain"), "headers.Content-Type"},
		{"reserved content-type lower", false, header("content-type", "text/plain"), "headers.content-type"},
		{"reserved X-Webhook-Foo", false, header("X-Webhook-Foo", "v"), "headers.X-Webhook-Foo"},
		{"reserved x-webhook-foo lower", false, header("x-webhook-foo", "v"), "headers.x-webhook-foo"},
		{"reserved webhook-signature", false, header("webhook-signature", "v1,x"), "headers.webhook-signature"},
		{"reserved Webhook-Id", false, header("Webhook-Id", "x"), "headers.Webhook-Id"},
		{"reserved Webhook-Future", false, header("webhook-future", "x"), "headers.webhook-future"},
		{"reserved X-Correlation-Id", false, header("x-correlation-id", "x"), "headers.x-correlation-id"},
		{"header value vertical tab", false, header("X-Foo", "a\vb"), "headers.X-Foo"},
		{"reserved Webhook-Timestamp", false, header("WEBHOOK-TIMESTAMP", "1"), "headers.WEBHOOK-TIMESTAMP"},
		{"reserved User-Agent", false, header("User-Agent", "evil"), "headers.User-Agent"},
		{"reserved Host", false, header("host", "internal"), "headers.host"},
		{"reserved Content-Length", false, header("Content-Length", "0"), "headers.Content-Length"},
		{"reserved Transfer-Encoding", false, header("Transfer-Encoding", "chunked"), "headers.Transfer-Encoding"},
		{"reserved X-Idempotency-Key", false, header("X-Idempotency-Key", "k"), "headers.X-Idempotency-Key"},

		{"metadata array", false, metadata(`[1,2]`), "metadata"},
		{"metadata string", false, metadata(`"x"`), "metadata"},
		{"metadata number", false, metadata(`42`), "metadata"},
		{"metadata null", false, metadata(`null`), "metadata"},
		{"metadata invalid", false, metadata(`{"a":`), "metadata"},
		{"metadata trailing data", false, metadata(`{"a":1} {"b":2}`), "metadata"},
		{"metadata empty", false, metadata(``), "metadata"},
		{"metadata too big", false, metadata(`{"k":"` + strings.Repeat("x", 8192-7) + `"}`), "metadata"},
		// metadata is jsonb, which refuses what Go's decoder passes.
		{"metadata NUL escape", false, metadata(`{"k":"a\u0000"}`), "metadata.k"},
		{"metadata lone surrogate", false, metadata(`{"k":[1,"\ud800"]}`), "metadata.k[1]"},
		{"metadata not UTF-8", false, metadata("{\"k\":\"caf\xe9\"}"), "metadata.k"},
		{"metadata NUL in a key", false, metadata(`{"a":{"\u0000":1}}`), "metadata.a"},
		{"header value not UTF-8", false, header("X-Foo", "caf\xe9"), "headers.X-Foo"},
		{"url not UTF-8", false, url("https://8.8.8.8/caf\xe9"), "url"},

		{"max_delay below base_delay", false, func(in *Input) {
			in.RetryConfig = &RetryInput{BaseDelayMS: ptr(int64(5000)), MaxDelayMS: ptr(int64(4999))}
		}, "retry_config.max_delay_ms"},
		{"schedule negative", false, func(in *Input) { in.RetryConfig = &RetryInput{ScheduleMS: ptr([]int64{1000, -1})} }, "retry_config.schedule_ms"},
		{"schedule above a day", false, func(in *Input) { in.RetryConfig = &RetryInput{ScheduleMS: ptr([]int64{86_400_001})} }, "retry_config.schedule_ms"},
		{"schedule 51 entries", false, func(in *Input) { in.RetryConfig = &RetryInput{ScheduleMS: ptr(slices.Repeat([]int64{1000}, 51))} }, "retry_config.schedule_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rules := testRules()
			rules.RequireHTTPS = tt.requireHTTPS
			in := validCreate()
			tt.mutate(&in)
			w, err := rules.Build(context.Background(), Webhook{}, in, true)
			requireField(t, err, tt.field)
			require.Equal(t, Webhook{}, w)
		})
	}
}

func TestBuildMetadataSizeLimit(t *testing.T) {
	t.Parallel()

	at := `{"k":"` + strings.Repeat("x", 8192-8) + `"}`
	require.Len(t, at, 8192)
	in := validCreate()
	in.Metadata = json.RawMessage(at)
	w, err := testRules().Build(context.Background(), Webhook{}, in, true)
	require.NoError(t, err)
	require.Equal(t, at, string(w.Metadata))

	in.Metadata = json.RawMessage(at + " ")
	_, err = testRules().Build(context.Background(), Webhook{}, in, true)
	requireField(t, err, "metadata")
}

func TestBuildHeaderLimits(t *testing.T) {
	t.Parallel()

	h := make(map[string]string, 20)
	for i := range 20 {
		h[fmt.Sprintf("x-h%d", i)] = strings.Repeat("v", 4096)
	}
	h["x-h0"] = "tab\tis fine, and so is ünïcode"
	in := validCreate()
	in.Headers = &h
	w, err := testRules().Build(context.Background(), Webhook{}, in, true)
	require.NoError(t, err)
	require.Len(t, w.Headers, 20)
	require.Equal(t, "tab\tis fine, and so is ünïcode", w.Headers["X-H0"])
	require.Equal(t, strings.Repeat("v", 4096), w.Headers["X-H19"])
	_, lower := w.Headers["x-h1"]
	require.False(t, lower, "names are stored canonical")
}

func TestBuildRefusesHeaderGivenTwiceInDifferentCase(t *testing.T) {
	t.Parallel()

	in := validCreate()
	in.Headers = &map[string]string{"X-Tenant": "a", "x-tenant": "b"}
	_, err := testRules().Build(context.Background(), Webhook{}, in, true)
	var fe *fielderr.Error
	require.ErrorAs(t, err, &fe)
	// Which spelling is reported depends on map order; both name the header.
	require.True(t, strings.EqualFold("headers.x-tenant", fe.Field), fe.Field)
	require.Contains(t, fe.Message, "twice")
}

// numericField is one bounded setting: set writes a value into an Input,
// get reads it back from the built Webhook.
type numericField struct {
	field       string
	below, lo   float64
	hi, above   float64
	set         func(in *Input, v float64)
	get         func(w Webhook) float64
	makeRoomFor func(in *Input) // keeps other checks from interfering
}

func numericFields() []numericField {
	i := func(v float64) *int { return ptr(int(v)) }
	i64 := func(v float64) *int64 { return ptr(int64(v)) }
	retry := func(in *Input) *RetryInput {
		if in.RetryConfig == nil {
			in.RetryConfig = &RetryInput{}
		}
		return in.RetryConfig
	}
	breaker := func(in *Input) *BreakerInput {
		if in.CircuitBreakerConfig == nil {
			in.CircuitBreakerConfig = &BreakerInput{}
		}
		return in.CircuitBreakerConfig
	}
	rate := func(in *Input) *RateLimitInput {
		if in.RateLimit == nil {
			in.RateLimit = &RateLimitInput{}
		}
		return in.RateLimit
	}
	const day = 86_400_000
	return []numericField{
		{field: "retry_config.max_attempts", below: 0, lo: 1, hi: 50, above: 51,
			set: func(in *Input, v float64) { retry(in).MaxAttempts = i(v) },
			get: func(w Webhook) float64 { return float64(w.RetryConfig.MaxAttempts) }},
		{field: "retry_config.base_delay_ms", below: 99, lo: 100, hi: day, above: day + 1,
			set:         func(in *Input, v float64) { retry(in).BaseDelayMS = i64(v) },
			get:         func(w Webhook) float64 { return float64(w.RetryConfig.BaseDelayMS) },
			makeRoomFor: func(in *Input) { retry(in).MaxDelayMS = ptr(int64(day)) }},
		{field: "retry_config.max_delay_ms", below: 99, lo: 100, hi: day, above: day + 1,
			set:         func(in *Input, v float64) { retry(in).MaxDelayMS = i64(v) },
			get:         func(w Webhook) float64 { return float64(w.RetryConfig.MaxDelayMS) },
			makeRoomFor: func(in *Input) { retry(in).BaseDelayMS = ptr(int64(100)) }},
		{field: "retry_config.backoff_multiplier", below: 0.99, lo: 1, hi: 10, above: 10.01,
			set: func(in *Input, v float64) { retry(in).BackoffMultiplier = ptr(v) },
			get: func(w Webhook) float64 { return w.RetryConfig.BackoffMultiplier }},
		{field: "retry_config.timeout_ms", below: 99, lo: 100, hi: 120_000, above: 120_001,
			set: func(in *Input, v float64) { retry(in).TimeoutMS = i64(v) },
			get: func(w Webhook) float64 { return float64(w.RetryConfig.TimeoutMS) }},
		{field: "retry_config.timeout_growth_factor", below: 0.99, lo: 1, hi: 3, above: 3.01,
			set: func(in *Input, v float64) { retry(in).TimeoutGrowthFactor = ptr(v) },
			get: func(w Webhook) float64 { return w.RetryConfig.TimeoutGrowthFactor }},
		{field: "retry_config.schedule_ms", below: -1, lo: 0, hi: day, above: day + 1,
			set: func(in *Input, v float64) { retry(in).ScheduleMS = ptr([]int64{1000, int64(v)}) },
			get: func(w Webhook) float64 { return float64(w.RetryConfig.ScheduleMS[1]) }},
		{field: "circuit_breaker_config.error_threshold_percentage", below: 0, lo: 1, hi: 100, above: 101,
			set: func(in *Input, v float64) { breaker(in).ErrorThresholdPercentage = i(v) },
			get: func(w Webhook) float64 { return float64(w.CircuitBreakerConfig.ErrorThresholdPercentage) }},
		{field: "circuit_breaker_config.minimum_throughput", below: 0, lo: 1, hi: 100_000, above: 100_001,
			set: func(in *Input, v float64) { breaker(in).MinimumThroughput = i(v) },
			get: func(w Webhook) float64 { return float64(w.CircuitBreakerConfig.MinimumThroughput) }},
		{field: "circuit_breaker_config.window_size_ms", below: 999, lo: 1000, hi: 3_600_000, above: 3_600_001,
			set: func(in *Input, v float64) { breaker(in).WindowSizeMS = i64(v) },
			get: func(w Webhook) float64 { return float64(w.CircuitBreakerConfig.WindowSizeMS) }},
		{field: "circuit_breaker_config.sleep_window_ms", below: 999, lo: 1000, hi: 3_600_000, above: 3_600_001,
			set: func(in *Input, v float64) { breaker(in).SleepWindowMS = i64(v) },
			get: func(w Webhook) float64 { return float64(w.CircuitBreakerConfig.SleepWindowMS) }},
		{field: "circuit_breaker_config.half_open_max_calls", below: 0, lo: 1, hi: 1000, above: 1001,
			set: func(in *Input, v float64) { breaker(in).HalfOpenMaxCalls = i(v) },
			get: func(w Webhook) float64 { return float64(w.CircuitBreakerConfig.HalfOpenMaxCalls) }},
		{field: "circuit_breaker_config.half_open_success_threshold", below: 0, lo: 1, hi: 100, above: 101,
			set: func(in *Input, v float64) { breaker(in).HalfOpenSuccessThreshold = i(v) },
			get: func(w Webhook) float64 { return float64(w.CircuitBreakerConfig.HalfOpenSuccessThreshold) }},
		{field: "rate_limit.requests_per_minute", below: 0, lo: 1, hi: 1_000_000, above: 1_000_001,
			set: func(in *Input, v float64) { rate(in).RequestsPerMinute = i(v) },
			get: func(w Webhook) float64 { return float64(w.RateLimit.RequestsPerMinute) }},
		{field: "rate_limit.burst", below: 0, lo: 1, hi: 100_000, above: 100_001,
			set: func(in *Input, v float64) { rate(in).Burst = i(v) },
			get: func(w Webhook) float64 { return float64(w.RateLimit.Burst) }},
	}
}

func TestBuildNumericRanges(t *testing.T) {
	t.Parallel()

	for _, f := range numericFields() {
		for _, c := range []struct {
			name string
			v    float64
			ok   bool
		}{
			{"below", f.below, false},
			{"lowest", f.lo, true},
			{"highest", f.hi, true},
			{"above", f.above, false},
			{"negative", -1_000_000, false},
		} {
			t.Run(f.field+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				in := validCreate()
				if f.makeRoomFor != nil {
					f.makeRoomFor(&in)
				}
				f.set(&in, c.v)
				w, err := testRules().Build(context.Background(), Webhook{}, in, true)
				if !c.ok {
					requireField(t, err, f.field)
					return
				}
				require.NoError(t, err)
				require.Equal(t, c.v, f.get(w))
			})
		}
	}
}

// cloneWebhook copies w deeply, so that a later comparison can tell whether
// anything reachable from w was changed.
func cloneWebhook(w Webhook) Webhook {
	c := w
	c.Events = slices.Clone(w.Events)
	c.Headers = maps.Clone(w.Headers)
	c.Metadata = bytes.Clone(w.Metadata)
	c.RetryConfig.ScheduleMS = slices.Clone(w.RetryConfig.ScheduleMS)
	if w.PreviousSecretExpiresAt != nil {
		t := *w.PreviousSecretExpiresAt
		c.PreviousSecretExpiresAt = &t
	}
	return c
}

// storedWebhook is a webhook as a patch finds it: created, then changed away
// from the defaults.
func storedWebhook(t *testing.T) Webhook {
	t.Helper()
	in := validCreate()
	in.Events = []string{"order.*", "user.created"}
	in.Secret = ptr(standardWebhooksSecret)
	in.OrderingGuarantee = ptr(OrderingPerEventType)
	in.Headers = &map[string]string{"X-Team": "ops"}
	in.Metadata = json.RawMessage(`{"owner":"ops"}`)
	in.RetryConfig = &RetryInput{MaxAttempts: ptr(7), ScheduleMS: ptr([]int64{1000, 2000})}
	in.CircuitBreakerConfig = &BreakerInput{MinimumThroughput: ptr(30)}
	in.RateLimit = &RateLimitInput{RequestsPerMinute: ptr(600), Burst: ptr(60)}
	w, err := testRules().Build(context.Background(), Webhook{}, in, true)
	require.NoError(t, err)
	w.PreviousSecret = "whsec_" + strings.Repeat("A", 32)
	return w
}

func TestBuildPatch(t *testing.T) {
	t.Parallel()

	base := storedWebhook(t)
	snapshot := cloneWebhook(base)

	tests := []struct {
		name string
		in   Input
		want func(w *Webhook)
	}{
		{"nothing", Input{}, func(*Webhook) {}},
		{"verify_url false", Input{VerifyURL: ptr(false)}, func(*Webhook) {}},
		{"url", Input{URL: ptr("https://hooks.example.com/v2")}, func(w *Webhook) { w.URL = "https://hooks.example.com/v2" }},
		{"events", Input{Events: []string{"invoice.*", "invoice.*"}}, func(w *Webhook) { w.Events = []string{"invoice.*"} }},
		{"active", Input{Active: ptr(false)}, func(w *Webhook) { w.Active = false }},
		{"ordering", Input{OrderingGuarantee: ptr(OrderingNone)}, func(w *Webhook) { w.OrderingGuarantee = OrderingNone }},
		{"trace propagation", Input{TracePropagation: ptr(false)}, func(w *Webhook) { w.TracePropagation = false }},
		{"headers replaced as a whole", Input{Headers: &map[string]string{"x-other": "1"}}, func(w *Webhook) { w.Headers = map[string]string{"X-Other": "1"} }},
		{"headers cleared", Input{Headers: &map[string]string{}}, func(w *Webhook) { w.Headers = map[string]string{} }},
		{"metadata replaced", Input{Metadata: json.RawMessage(`{"owner":"dev"}`)}, func(w *Webhook) { w.Metadata = json.RawMessage(`{"owner":"dev"}`) }},
		{"one retry field", Input{RetryConfig: &RetryInput{BaseDelayMS: ptr(int64(2500))}}, func(w *Webhook) { w.RetryConfig.BaseDelayMS = 2500 }},
		{"two retry fields", Input{RetryConfig: &RetryInput{BackoffMultiplier: ptr(3.5), TimeoutMS: ptr(int64(10_000))}}, func(w *Webhook) {
			w.RetryConfig.BackoffMultiplier = 3.5
			w.RetryConfig.TimeoutMS = 10_000
		}},
		{"schedule replaced", Input{RetryConfig: &RetryInput{ScheduleMS: ptr([]int64{5})}}, func(w *Webhook) { w.RetryConfig.ScheduleMS = []int64{5} }},
		{"schedule cleared", Input{RetryConfig: &RetryInput{ScheduleMS: ptr([]int64{})}}, func(w *Webhook) { w.RetryConfig.ScheduleMS = []int64{} }},
		{"empty retry object", Input{RetryConfig: &RetryInput{}}, func(*Webhook) {}},
		{"one breaker field", Input{CircuitBreakerConfig: &BreakerInput{Enabled: ptr(false)}}, func(w *Webhook) { w.CircuitBreakerConfig.Enabled = false }},
		{"other breaker fields", Input{CircuitBreakerConfig: &BreakerInput{WindowSizeMS: ptr(int64(120_000)), HalfOpenMaxCalls: ptr(2)}}, func(w *Webhook) {
			w.CircuitBreakerConfig.WindowSizeMS = 120_000
			w.CircuitBreakerConfig.HalfOpenMaxCalls = 2
		}},
		{"rate limit burst", Input{RateLimit: &RateLimitInput{Burst: ptr(5)}}, func(w *Webhook) { w.RateLimit.Burst = 5 }},
		{"rate limit rate", Input{RateLimit: &RateLimitInput{RequestsPerMinute: ptr(9)}}, func(w *Webhook) { w.RateLimit.RequestsPerMinute = 9 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := testRules().Build(context.Background(), base, tt.in, false)
			require.NoError(t, err)
			want := cloneWebhook(snapshot)
			tt.want(&want)
			require.Equal(t, want, got)
			require.Equal(t, snapshot, base, "Build must not modify base")
		})
	}
}

func TestBuildPatchRefuses(t *testing.T) {
	t.Parallel()

	base := storedWebhook(t)
	snapshot := cloneWebhook(base)

	tests := []struct {
		name  string
		in    Input
		field string
	}{
		{"new secret", Input{Secret: ptr(NewSecret())}, "secret"},
		{"same secret", Input{Secret: ptr(standardWebhooksSecret)}, "secret"},
		{"invalid secret", Input{Secret: ptr("nope")}, "secret"},
		{"empty url", Input{URL: ptr("")}, "url"},
		{"private url", Input{URL: ptr("http://192.168.1.10/")}, "url"},
		{"empty events", Input{Events: []string{}}, "events"},
		{"bad ordering", Input{OrderingGuarantee: ptr("total")}, "ordering_guarantee"},
		{"reserved header", Input{Headers: &map[string]string{"Webhook-Signature": "x"}}, "headers.Webhook-Signature"},
		{"metadata array", Input{Metadata: json.RawMessage(`[]`)}, "metadata"},
		{"retry field out of range", Input{RetryConfig: &RetryInput{MaxAttempts: ptr(0)}}, "retry_config.max_attempts"},
		// Merged with the stored max_delay_ms (300000), this base delay is too big.
		{"base delay above stored max", Input{RetryConfig: &RetryInput{BaseDelayMS: ptr(int64(300_001))}}, "retry_config.max_delay_ms"},
		{"max delay below stored base", Input{RetryConfig: &RetryInput{MaxDelayMS: ptr(int64(999))}}, "retry_config.max_delay_ms"},
		{"breaker field out of range", Input{CircuitBreakerConfig: &BreakerInput{SleepWindowMS: ptr(int64(0))}}, "circuit_breaker_config.sleep_window_ms"},
		{"rate limit out of range", Input{RateLimit: &RateLimitInput{Burst: ptr(0)}}, "rate_limit.burst"},
		{"schedule entry out of range", Input{RetryConfig: &RetryInput{ScheduleMS: ptr([]int64{-5})}}, "retry_config.schedule_ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := testRules().Build(context.Background(), base, tt.in, false)
			requireField(t, err, tt.field)
			require.Equal(t, Webhook{}, got)
			require.Equal(t, snapshot, base, "Build must not modify base")
		})
	}
}

func TestBuildPatchDoesNotApplyCreateDefaults(t *testing.T) {
	t.Parallel()

	// A stored webhook that is inactive and has no secret yet must stay so:
	// defaults and secrets belong to creation only.
	base := Webhook{URL: "https://hooks.example.com/in", Events: []string{"a"}, RetryConfig: DefaultRetryConfig(),
		CircuitBreakerConfig: DefaultBreakerConfig(), RateLimit: RateLimit{RequestsPerMinute: 1, Burst: 1}}
	got, err := testRules().Build(context.Background(), base, Input{Active: ptr(false)}, false)
	require.NoError(t, err)
	require.Equal(t, base, got)
}
