package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"
)

// Every route the router serves is described in /openapi.json with the same
// method, and the document describes no route that does not exist.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	r := e.do("GET", "/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var doc struct {
		OpenAPI string                            `json:"openapi"`
		Paths   map[string]map[string]interface{} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(r.Raw, &doc))
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.NotContains(t, string(r.Raw), `"nullable"`, "3.1 says a field may be null with a type list, not nullable")

	// Every operation has an operationId that a generated client can use
	// as a method name: an identifier, unique in the document.
	var ops struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(r.Raw, &ops))
	ident := regexp.MustCompile(`^[a-z][A-Za-z0-9]*$`)
	seen := map[string]string{}
	for path, methods := range ops.Paths {
		for method, op := range methods {
			where := method + " " + path
			require.Regexp(t, ident, op.OperationID, "operationId of %s", where)
			require.NotContains(t, seen, op.OperationID, "%s and %s share an operationId", where, seen[op.OperationID])
			seen[op.OperationID] = where
		}
	}

	param := regexp.MustCompile(`:([a-z_]+)`)
	served := map[string]bool{}
	for _, route := range e.srv.Handler().(*gin.Engine).Routes() {
		path := param.ReplaceAllString(route.Path, "{$1}")
		key := strings.ToLower(route.Method) + " " + path
		served[key] = true
		ops, ok := doc.Paths[path]
		require.True(t, ok, "route %s %s is missing from openapi.json", route.Method, path)
		require.Contains(t, ops, strings.ToLower(route.Method), "method %s of %s is missing from openapi.json", route.Method, path)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			require.True(t, served[method+" "+path], "openapi.json describes %s %s which is not served", method, path)
		}
	}
}

func TestErrorsAreJSON(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	big := `{"url": "https://8.8.8.8/", "events": ["a"], "metadata": {"x": "` + strings.Repeat("a", 70<<10) + `"}}`
	cases := []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown route", "GET", "/v1/nothing", "", 404, "not_found"},
		{"wrong method", "DELETE", "/v1/webhooks", "", 405, "method_not_allowed"},
		{"malformed webhook id", "GET", "/v1/webhooks/xyz", "", 404, "not_found"},
		{"unknown webhook id", "GET", "/v1/webhooks/01900000-0000-7000-8000-000000000000", "", 404, "not_found"},
		{"malformed JSON", "POST", "/v1/webhooks", `{"url": `, 400, "invalid_json"},
		{"empty body", "POST", "/v1/webhooks", ``, 400, "invalid_json"},
		{"array body", "POST", "/v1/webhooks", `[]`, 400, "invalid_json"},
		{"null body", "POST", "/v1/webhooks", `null`, 400, "invalid_json"},
		{"trailing data", "POST", "/v1/webhooks", `{"url": "https://8.8.8.8/", "events": ["a"]} {}`, 400, "invalid_json"},
		{"too large", "POST", "/v1/webhooks", big, 413, "payload_too_large"},
	}
	for _, tc := range cases {
		var body any
		if tc.body != "" {
			body = tc.body
		}
		r := e.do(tc.method, tc.path, key, body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Raw)
		require.Equal(t, tc.code, r.errCode(), tc.name)
		require.NotEmpty(t, r.Body["error"].(map[string]any)["message"], tc.name)
	}
	require.Equal(t, 0, e.count(`SELECT count(*) FROM webhooks`))
}

// A failure that is not the client's is a 500 with a generic message: the
// driver's text (SQL, table names) stays in the log.
func TestInternalErrorsHideDetails(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	_, key := e.tenantKey("acme")
	_, err := e.pool.Exec(context.Background(), `ALTER TABLE webhooks RENAME TO webhooks_gone`)
	require.NoError(t, err)
	r := e.do("GET", "/v1/webhooks", key, nil)
	require.Equal(t, http.StatusInternalServerError, r.Status)
	require.Equal(t, "internal_error", r.errCode())
	require.NotContains(t, strings.ToLower(string(r.Raw)), "webhooks")
	require.NotContains(t, strings.ToLower(string(r.Raw)), "sql")
	require.Contains(t, e.logBuf.String(), "webhooks", "the cause is logged")
}

func TestReadiness(t *testing.T) {
	t.Parallel()
	up := newAPI(t)
	r := up.do("GET", "/readyz", "", nil)
	require.Equal(t, http.StatusOK, r.Status, string(r.Raw))
	require.Equal(t, "ok", r.Body["status"])
	require.Equal(t, http.StatusOK, up.do("GET", "/healthz", "", nil).Status)

	down := newAPI(t, func(o *apiOptions) {
		o.checks["rabbitmq"] = func(context.Context) error { return errors.New("connection refused") }
	})
	r = down.do("GET", "/readyz", "", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.Status)
	require.Equal(t, []any{"rabbitmq"}, r.Body["down"])
	require.Equal(t, http.StatusOK, down.do("GET", "/healthz", "", nil).Status, "liveness does not depend on the broker")
}

func TestMetricsEndpoint(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	e.do("GET", "/v1/webhooks", "", nil)
	r := e.do("GET", "/metrics", "", nil)
	require.Equal(t, http.StatusOK, r.Status)
	require.Contains(t, string(r.Raw), `hookline_http_requests_total{code="401",method="GET",route="/v1/webhooks"}`)
	require.Contains(t, string(r.Raw), "hookline_http_request_duration_seconds_bucket")
}
