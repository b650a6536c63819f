package dlqcli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testKey is the tenant API key the fake api accepts.
const testKey = "hk_test_5ecret"

// request is what the fake api received.
type request struct {
	Method string
	Path   string // escaped
	Query  url.Values
	Body   string
	Type   string
}

// fakeAPI is an httptest server that implements the api's DLQ contract:
// routes answer what the test gives them, after the key is checked like
// the api checks it. It records every request that passed the check.
type fakeAPI struct {
	URL string
	mux *http.ServeMux

	mu   sync.Mutex
	reqs []request
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{mux: http.NewServeMux()}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+testKey {
		writeJSON(w, http.StatusUnauthorized, apiErr("unauthorized", "missing or invalid API key"))
		return
	}
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, request{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.Query(), Body: string(body),
		Type: r.Header.Get("Content-Type")})
	f.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.mux.ServeHTTP(w, r)
}

// handle answers pattern (as http.ServeMux takes it) with status and body.
func (f *fakeAPI) handle(pattern string, status int, body any) {
	f.mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, status, body) })
}

// handleSequence answers pattern with the next body of bodies on each
// request, then repeats the last one.
func (f *fakeAPI) handleSequence(pattern string, bodies ...any) {
	var mu sync.Mutex
	n := 0
	f.mux.HandleFunc(pattern, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		b := bodies[min(n, len(bodies)-1)]
		n++
		mu.Unlock()
		writeJSON(w, http.StatusOK, b)
	})
}

// requests returns what the api received so far.
func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func apiErr(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

// result is one run of the command line.
type result struct {
	Code   int
	Stdout string
	Stderr string
}

// runWith runs args with HOOKLINE_API_URL and HOOKLINE_API_KEY set to
// apiURL and testKey, polling batches every millisecond.
func runWith(ctx context.Context, t *testing.T, apiURL string, tty bool, args ...string) result {
	t.Helper()
	env := map[string]string{envAPIURL: apiURL, envAPIKey: testKey}
	var out, errb bytes.Buffer
	a := &app{stdout: &out, stderr: &errb, getenv: func(k string) string { return env[k] }, poll: time.Millisecond, tty: tty}
	code := a.run(ctx, args)
	res := result{Code: code, Stdout: out.String(), Stderr: errb.String()}
	require.NotContains(t, res.Stdout+res.Stderr, testKey, "the API key must never be printed")
	return res
}

func run(t *testing.T, api *fakeAPI, args ...string) result {
	t.Helper()
	return runWith(context.Background(), t, api.URL, false, args...)
}
