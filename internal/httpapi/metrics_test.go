package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/console"
	"github.com/hookline/hookline/internal/tenant"
	"github.com/hookline/hookline/internal/webhook"
)

// Requests with made-up methods and paths add no series: the method label
// takes the methods the API knows and "other", the route label the route
// templates and "unmatched". Before, each 4 KB method was a label value of
// its own, and twenty of them grew a scrape to over a megabyte.
func TestMetricLabelsStayBounded(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	for i := range 20 {
		method := randomToken(t, 2048) // 4 KB of hex
		req, err := http.NewRequest(method, e.http.URL+"/healthz", nil)
		require.NoError(t, err)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, res.Body.Close())
		require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "request %d", i)
		require.Equal(t, http.StatusNotFound, e.do("GET", "/v1/"+randomToken(t, 32), "", nil).Status)
		require.Equal(t, http.StatusNotFound, e.do(method, "/"+randomToken(t, 32), "", nil).Status)
	}

	// The registry is the process's: other tests of this package count
	// their requests in it too, some on a server with the console, whose
	// routes are templates as well.
	withConsole, err := New(Deps{Config: config.Default(), Log: slog.New(slog.DiscardHandler), Tenants: tenant.NewStore(e.pool),
		Webhooks: webhook.NewStore(e.pool), Console: console.Config{DB: e.pool}})
	require.NoError(t, err)
	routes := map[string]bool{"unmatched": true}
	for _, srv := range []*Server{e.srv, withConsole} {
		for _, r := range srv.Handler().(*gin.Engine).Routes() {
			routes[r.Path] = true
		}
	}
	methods := map[string]bool{"other": true}
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"} {
		methods[m] = true
	}
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	seen := 0
	for _, f := range families {
		if f.GetName() != "hookline_http_requests_total" && f.GetName() != "hookline_http_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			seen++
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "method":
					require.True(t, methods[l.GetValue()], "%s has method %.40q...", f.GetName(), l.GetValue())
				case "route":
					require.True(t, routes[l.GetValue()], "%s has route %.40q...", f.GetName(), l.GetValue())
				}
			}
		}
	}
	require.NotZero(t, seen, "the requests were counted")
}

func randomToken(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}
