package config

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Tracing configures OpenTelemetry tracing (docs/TRACING.md): spans are
// exported over OTLP/HTTP. It is off unless Enabled is set or the
// environment names an OTLP endpoint; off, no span is started and nothing
// is exported. The standard OTEL_* variables override the file: those read
// here are named beside each field, and the OpenTelemetry SDK itself reads
// the exporter's and batch processor's others (OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_EXPORTER_OTLP_TIMEOUT, OTEL_BSP_SCHEDULE_DELAY, ...) and
// OTEL_RESOURCE_ATTRIBUTES.
type Tracing struct {
	// Enabled turns tracing on. Default false. OTEL_EXPORTER_OTLP_ENDPOINT
	// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT in the environment, or
	// OTEL_TRACES_EXPORTER=otlp, turn it on; OTEL_TRACES_EXPORTER=none or
	// OTEL_SDK_DISABLED=true turn it off whatever else is set.
	Enabled bool `yaml:"enabled"`
	// Endpoint is the base URL of the OTLP/HTTP receiver; spans go to
	// Endpoint + "/v1/traces" (env OTEL_EXPORTER_OTLP_ENDPOINT). Default
	// http://localhost:4318.
	Endpoint string `yaml:"endpoint"`
	// TracesEndpoint, when set, is the full URL spans are sent to, used as
	// it is (env OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). Default: from Endpoint.
	TracesEndpoint string `yaml:"traces_endpoint"`
	// ServiceName names the process in traces (env OTEL_SERVICE_NAME).
	// Default hookline-api, hookline-worker or hookline-dlq.
	ServiceName string `yaml:"service_name"`
	// Sampler decides which new traces are recorded (env
	// OTEL_TRACES_SAMPLER): always_on, always_off, traceidratio,
	// parentbased_always_on, parentbased_always_off or
	// parentbased_traceidratio. The parentbased ones follow the decision of
	// the producer's trace when a publish carries one, and every span of a
	// delivery follows its publish. Default parentbased_always_on.
	Sampler string `yaml:"sampler"`
	// SamplerArg is the share of traces the traceidratio samplers record,
	// from 0 to 1 (env OTEL_TRACES_SAMPLER_ARG). Default 1.
	SamplerArg float64 `yaml:"sampler_arg"`
}

// Samplers are the values Tracing.Sampler accepts.
var Samplers = []string{"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

func defaultTracing() Tracing {
	return Tracing{Endpoint: "http://localhost:4318", Sampler: "parentbased_always_on", SamplerArg: 1}
}

// ExportURL is the URL spans are posted to.
func (t Tracing) ExportURL() string {
	if t.TracesEndpoint != "" {
		return t.TracesEndpoint
	}
	return strings.TrimSuffix(t.Endpoint, "/") + "/v1/traces"
}

// applyEnv reads the standard OpenTelemetry variables.
func (t *Tracing) applyEnv(getenv func(string) string) error {
	for name, dst := range map[string]*string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":        &t.Endpoint,
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": &t.TracesEndpoint,
		"OTEL_SERVICE_NAME":                  &t.ServiceName,
		"OTEL_TRACES_SAMPLER":                &t.Sampler,
	} {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			*dst = v
		}
	}
	// An endpoint named in the environment is a request to export there.
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" {
		t.Enabled = true
	}
	if v := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("config tracing.sampler_arg (OTEL_TRACES_SAMPLER_ARG): %q is not a number", v)
		}
		t.SamplerArg = f
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := strings.TrimSpace(getenv(name)); v != "" && v != "http/protobuf" {
			return fmt.Errorf("config %s: %q is not supported; spans are exported as http/protobuf", name, v)
		}
	}
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "":
	case "otlp":
		t.Enabled = true
	case "none":
		t.Enabled = false
	default:
		return fmt.Errorf("config OTEL_TRACES_EXPORTER: %q is not supported (otlp or none)", v)
	}
	if v := strings.TrimSpace(getenv("OTEL_SDK_DISABLED")); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("config OTEL_SDK_DISABLED: %q is not a boolean", v)
		}
		t.Enabled = t.Enabled && !disabled
	}
	return nil
}

// validate checks the settings that matter when tracing is on.
func (t Tracing) validate(bad func(string, string, ...any)) {
	if !t.Enabled {
		return
	}
	checkHTTP := func(name, raw string) {
		if u, err := url.Parse(raw); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			bad(name, "must be an http or https URL, got %q", raw)
		}
	}
	checkHTTP("tracing.endpoint (OTEL_EXPORTER_OTLP_ENDPOINT)", t.Endpoint)
	if t.TracesEndpoint != "" {
		checkHTTP("tracing.traces_endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)", t.TracesEndpoint)
	}
	if !slices.Contains(Samplers, t.Sampler) {
		bad("tracing.sampler (OTEL_TRACES_SAMPLER)", "must be one of %s, got %q", strings.Join(Samplers, ", "), t.Sampler)
	}
	if t.SamplerArg < 0 || t.SamplerArg > 1 {
		bad("tracing.sampler_arg (OTEL_TRACES_SAMPLER_ARG)", "must be between 0 and 1, got %g", t.SamplerArg)
	}
}
