package metrics_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	_ "github.com/hookline/hookline/internal/metrics"
)

// A label whose values a tenant chooses (an event type, a source, a name)
// lets one tenant create series without bound in every process that counts
// it. The one event_type label is that of owner notifications, whose types
// are hookline's own (notify.Types).
func TestNoLabelTakesTenantValues(t *testing.T) {
	t.Parallel()
	tenantChosen := map[string]bool{"event_type": true, "source": true, "idempotency_key": true, "name": true, "url": true}
	allowed := map[string]string{"hookline_owner_notifications_total": "event_type"}
	ch := make(chan *prometheus.Desc, 256)
	go func() {
		prometheus.DefaultRegisterer.(*prometheus.Registry).Describe(ch)
		close(ch)
	}()
	desc := regexp.MustCompile(`fqName: "([a-z_:]+)".*variableLabels: \{([a-z_,]*)\}`)
	checked := 0
	for d := range ch {
		m := desc.FindStringSubmatch(d.String())
		require.NotNil(t, m, d.String())
		if !strings.HasPrefix(m[1], "hookline_") || m[2] == "" {
			continue
		}
		checked++
		for _, label := range strings.Split(m[2], ",") {
			if tenantChosen[label] {
				require.Equal(t, allowed[m[1]], label, "%s is labelled by %s, which tenants choose", m[1], label)
			}
		}
	}
	require.NotZero(t, checked)
}
