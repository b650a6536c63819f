package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/health"
	"github.com/hookline/hookline/internal/testlog"
)

// driverError is what a failing Postgres ping says: host, user, database.
const driverError = `failed to connect to user=hookline_api database=hookline: 10.20.30.40:5432: password authentication failed`

// /readyz is served to anyone: it names what is down and nothing of why;
// the why is in the log.
func TestReadinessNamesWhatIsDownAndNotWhy(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	checks := health.Checks{
		"postgres": func(context.Context) error { return errors.New(driverError) },
		"redis":    func(context.Context) error { return nil },
	}.LogFailures(slog.New(slog.NewJSONHandler(logs, nil)))
	srv := httptest.NewServer(health.ReadyHandler(checks))
	t.Cleanup(srv.Close)

	res, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, res.StatusCode)
	var rep health.Report
	require.NoError(t, json.Unmarshal(raw, &rep))
	require.Equal(t, health.Report{Status: "unavailable", Checks: map[string]string{"postgres": "down", "redis": "ok"},
		Down: []string{"postgres"}}, rep)
	for _, leak := range []string{"10.20.30.40", "hookline_api", "password"} {
		require.NotContains(t, string(raw), leak)
	}
	require.Contains(t, logs.String(), "password authentication failed", "the operator finds the cause in the log")
	require.Contains(t, logs.String(), `"dependency":"postgres"`)
}
