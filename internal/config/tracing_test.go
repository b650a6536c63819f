package config_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
)

// Tracing is off by default; the file turns it on, and the standard
// OpenTelemetry variables override the file.
func TestTracingFromFileAndEnvironment(t *testing.T) {
	t.Parallel()
	base := map[string]string{"ADMIN_TOKEN": "tok"}
	with := func(kv map[string]string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for k, v := range kv {
			out[k] = v
		}
		return out
	}
	load := func(file string, kv map[string]string) config.Tracing {
		t.Helper()
		path := ""
		if file != "" {
			path = writeFile(t, file)
		}
		cfg, err := config.Load(path, env(with(kv)))
		require.NoError(t, err)
		return cfg.Tracing
	}

	off := load("", nil)
	require.Equal(t, config.Tracing{Endpoint: "http://localhost:4318", Sampler: "parentbased_always_on", SamplerArg: 1}, off)
	require.Equal(t, "http://localhost:4318/v1/traces", off.ExportURL())

	file := "tracing:\n  enabled: true\n  endpoint: http://collector:4318/\n  service_name: hl\n  sampler: parentbased_traceidratio\n  sampler_arg: 0.25\n"
	got := load(file, nil)
	require.True(t, got.Enabled)
	require.Equal(t, "http://collector:4318/v1/traces", got.ExportURL())
	require.Equal(t, "hl", got.ServiceName)
	require.Equal(t, "parentbased_traceidratio", got.Sampler)
	require.InDelta(t, 0.25, got.SamplerArg, 1e-9)

	got = load(file, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example/otlp",
		"OTEL_SERVICE_NAME": "svc", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"})
	require.Equal(t, "https://traces.example/otlp", got.ExportURL())
	require.Equal(t, "svc", got.ServiceName)
	require.Equal(t, "traceidratio", got.Sampler)
	require.InDelta(t, 0.01, got.SamplerArg, 1e-9)

	require.True(t, load("", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}).Enabled, "an endpoint turns it on")
	require.True(t, load("", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}).Enabled)
	require.False(t, load(file, map[string]string{"OTEL_TRACES_EXPORTER": "none"}).Enabled)
	require.False(t, load(file, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}).Enabled)
	require.True(t, load(file, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}).Enabled)
}

// Bad tracing settings stop the process, each naming the setting; while
// tracing is off its settings are not looked at.
func TestTracingRefuses(t *testing.T) {
	t.Parallel()
	for kv, want := range map[[2]string]string{
		{"OTEL_TRACES_SAMPLER", "sometimes"}:              "tracing.sampler (OTEL_TRACES_SAMPLER)",
		{"OTEL_TRACES_SAMPLER_ARG", "1.5"}:                "tracing.sampler_arg (OTEL_TRACES_SAMPLER_ARG)",
		{"OTEL_TRACES_SAMPLER_ARG", "half"}:               "OTEL_TRACES_SAMPLER_ARG",
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"}: "tracing.endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)",
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}:           "OTEL_EXPORTER_OTLP_PROTOCOL",
		{"OTEL_TRACES_EXPORTER", "zipkin"}:                "OTEL_TRACES_EXPORTER",
		{"OTEL_SDK_DISABLED", "perhaps"}:                  "OTEL_SDK_DISABLED",
	} {
		vars := map[string]string{"ADMIN_TOKEN": "tok", "OTEL_TRACES_EXPORTER": "otlp", kv[0]: kv[1]}
		_, err := config.Load("", env(vars))
		require.ErrorContains(t, err, want, "%s=%s", kv[0], kv[1])
	}
	_, err := config.Load("", env(map[string]string{"ADMIN_TOKEN": "tok", "OTEL_TRACES_SAMPLER": "sometimes"}))
	require.NoError(t, err, "tracing is off")
}
