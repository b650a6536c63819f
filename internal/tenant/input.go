package tenant

import (
	"strings"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/webhook"
)

// Input is a create or update request for a tenant; nil fields were not given.
type Input struct {
	Name      *string `json:"name"`
	RateLimit *struct {
		RequestsPerMinute *int `json:"requests_per_minute"`
		Burst             *int `json:"burst"`
	} `json:"rate_limit"`
	PublishRateLimit *struct {
		RequestsPerSecond *int `json:"requests_per_second"`
		Burst             *int `json:"burst"`
	} `json:"publish_rate_limit"`
	AutoDisable *struct {
		FailingForMS *int64 `json:"failing_for_ms"`
	} `json:"auto_disable"`
	Portal *PortalInput `json:"portal"`
}

const (
	maxNameLen  = 200
	maxRate     = 10_000_000
	maxBurstLen = 10_000_000
)

// Build applies in to base (for a create, a tenant holding the configured
// default limits) and validates the result.
func Build(base Tenant, in Input, creating bool) (Tenant, error) {
	t := base
	if in.Name != nil {
		t.Name = strings.TrimSpace(*in.Name)
	}
	if (creating || in.Name != nil) && (t.Name == "" || len(t.Name) > maxNameLen) {
		return Tenant{}, fielderr.New("name", "is required, at most %d characters", maxNameLen)
	}
	if err := fielderr.Text("name", t.Name); err != nil {
		return Tenant{}, err
	}
	if rl := in.RateLimit; rl != nil {
		setInt(&t.RateLimit.RequestsPerMinute, rl.RequestsPerMinute)
		setInt(&t.RateLimit.Burst, rl.Burst)
	}
	if pl := in.PublishRateLimit; pl != nil {
		setInt(&t.PublishRateLimit.RequestsPerSecond, pl.RequestsPerSecond)
		setInt(&t.PublishRateLimit.Burst, pl.Burst)
	}
	if ad := in.AutoDisable; ad != nil {
		setInt64(&t.AutoDisable.FailingForMS, ad.FailingForMS)
	}
	portal, err := in.Portal.apply(t.Portal)
	if err != nil {
		return Tenant{}, err
	}
	t.Portal = portal
	if t.Portal.FrameOrigins == nil {
		t.Portal.FrameOrigins = []string{}
	}
	return t, fielderr.First(
		fielderr.InRange("rate_limit.requests_per_minute", t.RateLimit.RequestsPerMinute, 1, maxRate),
		fielderr.InRange("rate_limit.burst", t.RateLimit.Burst, 1, maxBurstLen),
		fielderr.InRange("publish_rate_limit.requests_per_second", t.PublishRateLimit.RequestsPerSecond, 1, maxRate),
		fielderr.InRange("publish_rate_limit.burst", t.PublishRateLimit.Burst, 1, maxBurstLen),
		webhook.CheckAutoDisableMS("auto_disable.failing_for_ms", t.AutoDisable.FailingForMS),
	)
}

// WithDefaults returns a tenant holding the configured default limits and
// auto-disable window.
func WithDefaults(d config.Defaults) Tenant {
	return Tenant{RateLimit: d.TenantRateLimit, PublishRateLimit: d.TenantPublishRateLimit,
		AutoDisable: AutoDisable{FailingForMS: d.TenantAutoDisable.FailingFor.D().Milliseconds()},
		Portal:      Portal{Enabled: true}}
}

func setInt(dst *int, src *int) {
	if src != nil {
		*dst = *src
	}
}

func setInt64(dst *int64, src *int64) {
	if src != nil {
		*dst = *src
	}
}
