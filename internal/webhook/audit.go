package webhook

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/audit"
)

// auditUpdate writes the audit rows of an update from before to after,
// in its transaction: webhook.paused or webhook.resumed when it changed
// whether the webhook is active, and webhook.updated naming every other
// field that changed (details.changed), the URL before and after, and the
// headers whose values were cleared. Header names at most: never a header
// value or the secret.
func auditUpdate(ctx context.Context, tx pgx.Tx, before, after Webhook) error {
	target := after.ID.String()
	if before.Active != after.Active {
		action := audit.WebhookResumed
		if !after.Active {
			action = audit.WebhookPaused
		}
		if err := audit.Record(ctx, tx, after.TenantID, action, "webhook", target, nil); err != nil {
			return err
		}
	}
	changed := changedFields(before, after)
	if len(changed) == 0 {
		return nil
	}
	details := map[string]any{"changed": changed}
	if before.URL != after.URL {
		details["url"] = map[string]string{"from": before.URL, "to": after.URL}
	}
	if len(after.ClearedHeaders) > 0 {
		details["cleared_headers"] = after.ClearedHeaders
	}
	return audit.Record(ctx, tx, after.TenantID, audit.WebhookUpdated, "webhook", target, details)
}

// changedFields names the settings of the webhook, by their API names,
// that differ between before and after, whether it is active aside.
func changedFields(before, after Webhook) []string {
	fields := []struct {
		name string
		same bool
	}{
		{"url", before.URL == after.URL},
		{"events", slices.Equal(before.Events, after.Events)},
		{"filter", before.Filter == after.Filter},
		{"retry_config", reflect.DeepEqual(before.RetryConfig, after.RetryConfig)},
		{"circuit_breaker_config", reflect.DeepEqual(before.CircuitBreakerConfig, after.CircuitBreakerConfig)},
		{"rate_limit", reflect.DeepEqual(before.RateLimit, after.RateLimit)},
		{"ordering_guarantee", before.OrderingGuarantee == after.OrderingGuarantee},
		{"headers", maps.Equal(before.Headers, after.Headers)},
		{"metadata", sameJSON(before.Metadata, after.Metadata)},
		{"verification", sameVerification(before.Verification, after.Verification)},
		{"trace_propagation", before.TracePropagation == after.TracePropagation},
		{"auto_disable", reflect.DeepEqual(before.AutoDisable, after.AutoDisable)},
	}
	var changed []string
	for _, f := range fields {
		if !f.same {
			changed = append(changed, f.name)
		}
	}
	return changed
}

// sameJSON compares two JSON documents by value, whatever their key order.
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(x, y)
}

// sameVerification reports whether an update left the verification as it
// was: asked for or not, and in the same state.
func sameVerification(a, b *Verification) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.State == b.State
}
