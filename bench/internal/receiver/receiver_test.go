package receiver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/bench/internal/receiver"
	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
)

// start serves a new Receiver on a real HTTP server for the test.
func start(t *testing.T, cfg receiver.Config) (*receiver.Receiver, string) {
	t.Helper()
	rc, err := receiver.New(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	t.Cleanup(rc.Close) // runs first: releases hanging requests
	return rc, srv.URL
}

// delivery describes one webhook request as hookline sends it.
type delivery struct {
	id      string
	attempt int
	body    string
	keys    [][]byte  // signing keys; nil: unsigned
	at      time.Time // signing time; zero: now
	edit    func(h http.Header, body *string)
}

func (d delivery) request(t *testing.T, ctx context.Context, url string) *http.Request {
	t.Helper()
	body := d.body
	if body == "" {
		body = `{"id":"evt_1","event_type":"order.created","data":{}}`
	}
	at := d.at
	if at.IsZero() {
		at = time.Now()
	}
	ts := at.Unix()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Webhook-ID", "wh_1")
	h.Set("X-Webhook-Event", "order.created")
	h.Set("X-Webhook-Delivery", d.id)
	h.Set("X-Webhook-Attempt", strconv.Itoa(d.attempt))
	h.Set("X-Webhook-Timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-id", d.id)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	if d.keys != nil {
		h.Set("X-Webhook-Signature", signature.Legacy(ts, []byte(body), d.keys...))
		h.Set("webhook-signature", signature.Standard(d.id, ts, []byte(body), d.keys...))
	}
	if d.edit != nil {
		d.edit(h, &body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/hook", strings.NewReader(body))
	require.NoError(t, err)
	req.Header = h
	return req
}

// send posts d and returns the status and Retry-After header.
func send(t *testing.T, url string, d delivery) (int, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(d.request(t, context.Background(), url))
	require.NoError(t, err)
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

func newKey(t *testing.T) (string, []byte) {
	t.Helper()
	secret := webhook.NewSecret()
	key, err := webhook.DecodeSecret(secret)
	require.NoError(t, err)
	return secret, key
}

func TestModes(t *testing.T) {
	t.Parallel()
	type step struct {
		id         string
		attempt    int
		status     int
		retryAfter string
	}
	tests := []struct {
		name  string
		cfg   receiver.Config
		steps []step
		stats receiver.Stats
	}{
		{
			name:  "ok by default",
			steps: []step{{"d1", 1, 200, ""}, {"d2", 1, 200, ""}},
			stats: receiver.Stats{Requests: 2, Unverified: 2, Succeeded: 2, Deliveries: 2, Delivered: 2},
		},
		{
			name:  "fail",
			cfg:   receiver.Config{Mode: receiver.ModeFail},
			steps: []step{{"d1", 1, 500, ""}, {"d1", 2, 500, ""}},
			stats: receiver.Stats{Requests: 2, Unverified: 2, Failed: 2, Deliveries: 1},
		},
		{
			name: "flaky fails the first attempts of each delivery",
			cfg:  receiver.Config{Mode: receiver.ModeFlaky, FailFirst: 2},
			steps: []step{
				{"d1", 1, 500, ""}, {"d2", 1, 500, ""}, {"d1", 2, 500, ""},
				{"d1", 3, 200, ""}, {"d2", 2, 500, ""}, {"d2", 3, 200, ""},
			},
			stats: receiver.Stats{Requests: 6, Unverified: 6, Succeeded: 2, Failed: 4, Deliveries: 2, Delivered: 2},
		},
		{
			name:  "flaky with fail-first 0 succeeds",
			cfg:   receiver.Config{Mode: receiver.ModeFlaky},
			steps: []step{{"d1", 1, 200, ""}},
			stats: receiver.Stats{Requests: 1, Unverified: 1, Succeeded: 1, Deliveries: 1, Delivered: 1},
		},
		{
			name:  "429 with Retry-After",
			cfg:   receiver.Config{Mode: receiver.ModeRateLimit, RetryAfter: 7},
			steps: []step{{"d1", 1, 429, "7"}},
			stats: receiver.Stats{Requests: 1, Unverified: 1, Failed: 1, Deliveries: 1},
		},
		{
			name:  "429 without Retry-After",
			cfg:   receiver.Config{Mode: receiver.ModeRateLimit},
			steps: []step{{"d1", 1, 429, ""}},
			stats: receiver.Stats{Requests: 1, Unverified: 1, Failed: 1, Deliveries: 1},
		},
		{
			name:  "status overrides mode",
			cfg:   receiver.Config{Mode: receiver.ModeFail, Status: 418},
			steps: []step{{"d1", 1, 418, ""}},
			stats: receiver.Stats{Requests: 1, Unverified: 1, Failed: 1, Deliveries: 1},
		},
		{
			name:  "forced 503 carries Retry-After",
			cfg:   receiver.Config{Status: 503, RetryAfter: 3},
			steps: []step{{"d1", 1, 503, "3"}},
			stats: receiver.Stats{Requests: 1, Unverified: 1, Failed: 1, Deliveries: 1},
		},
		{
			name:  "forced 2xx counts as success",
			cfg:   receiver.Config{Mode: receiver.ModeFail, Status: 204},
			steps: []step{{"d1", 1, 204, ""}},
			stats: receiver.Stats{Requests: 1, Unverified: 1, Succeeded: 1, Deliveries: 1, Delivered: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc, url := start(t, tt.cfg)
			for i, s := range tt.steps {
				status, retryAfter := send(t, url, delivery{id: s.id, attempt: s.attempt})
				require.Equal(t, s.status, status, "step %d", i)
				require.Equal(t, s.retryAfter, retryAfter, "step %d", i)
			}
			require.Equal(t, tt.stats, rc.Stats())
		})
	}
}

func TestSignatureVerdicts(t *testing.T) {
	t.Parallel()
	secret, key := newKey(t)
	oldSecret, oldKey := newKey(t)
	_, otherKey := newKey(t)
	setHeader := func(name, value string) func(http.Header, *string) {
		return func(h http.Header, _ *string) { h.Set(name, value) }
	}

	tests := []struct {
		name    string
		secrets []string
		d       delivery
		good    bool
	}{
		{name: "both valid", secrets: []string{secret}, d: delivery{keys: [][]byte{key}}, good: true},
		{name: "rotation, receiver has the new secret", secrets: []string{secret}, d: delivery{keys: [][]byte{key, oldKey}}, good: true},
		{name: "rotation, receiver has the old secret", secrets: []string{oldSecret}, d: delivery{keys: [][]byte{key, oldKey}}, good: true},
		{name: "receiver rotating, sender on the old key", secrets: []string{secret, oldSecret}, d: delivery{keys: [][]byte{oldKey}}, good: true},
		{name: "wrong secret", secrets: []string{secret}, d: delivery{keys: [][]byte{otherKey}}},
		{name: "tampered body", secrets: []string{secret}, d: delivery{keys: [][]byte{key}, edit: func(_ http.Header, b *string) { *b += " " }}},
		{name: "tampered webhook-id", secrets: []string{secret}, d: delivery{keys: [][]byte{key}, edit: setHeader("webhook-id", "other")}},
		{name: "standard signature missing", secrets: []string{secret}, d: delivery{keys: [][]byte{key}, edit: setHeader("webhook-signature", "")}},
		{name: "legacy signature missing", secrets: []string{secret}, d: delivery{keys: [][]byte{key}, edit: setHeader("X-Webhook-Signature", "")}},
		{name: "legacy signature from another key", secrets: []string{secret}, d: delivery{keys: [][]byte{key},
			edit: func(h http.Header, b *string) {
				h.Set("X-Webhook-Signature", signature.Legacy(time.Now().Unix(), []byte(*b), otherKey))
			}}},
		{name: "stale", secrets: []string{secret}, d: delivery{keys: [][]byte{key}, at: time.Now().Add(-10 * time.Minute)}},
		{name: "future", secrets: []string{secret}, d: delivery{keys: [][]byte{key}, at: time.Now().Add(10 * time.Minute)}},
		{name: "unsigned", secrets: []string{secret}, d: delivery{}},
	}
	for _, tt := range tests {
		for _, reject := range []bool{false, true} {
			t.Run(tt.name+"/reject="+strconv.FormatBool(reject), func(t *testing.T) {
				t.Parallel()
				rc, url := start(t, receiver.Config{Secrets: tt.secrets, RejectBadSignatures: reject})
				d := tt.d
				d.id, d.attempt = "d1", 1
				status, _ := send(t, url, d)
				want := receiver.Stats{Requests: 1, Deliveries: 1}
				switch {
				case tt.good:
					require.Equal(t, 200, status)
					want.GoodSignatures, want.Succeeded, want.Delivered = 1, 1, 1
				case reject:
					require.Equal(t, 401, status)
					want.BadSignatures, want.Failed = 1, 1
				default:
					require.Equal(t, 200, status)
					want.BadSignatures, want.Succeeded, want.Delivered = 1, 1, 1
				}
				require.Equal(t, want, rc.Stats())
			})
		}
	}
}

func TestUnverifiedWithoutSecrets(t *testing.T) {
	t.Parallel()
	_, key := newKey(t)
	rc, url := start(t, receiver.Config{})
	status, _ := send(t, url, delivery{id: "d1", attempt: 1, keys: [][]byte{key}})
	require.Equal(t, 200, status)
	status, _ = send(t, url, delivery{id: "d2", attempt: 1})
	require.Equal(t, 200, status)
	s := rc.Stats()
	require.Equal(t, int64(2), s.Unverified)
	require.Zero(t, s.GoodSignatures)
	require.Zero(t, s.BadSignatures)
}

func TestDuplicates(t *testing.T) {
	t.Parallel()
	rc, url := start(t, receiver.Config{Mode: receiver.ModeFlaky, FailFirst: 1})
	for i, step := range []struct {
		d      delivery
		status int
	}{
		{delivery{id: "d1", attempt: 1}, 500},
		{delivery{id: "d1", attempt: 1}, 200}, // same attempt again
		{delivery{id: "d1", attempt: 2}, 200}, // succeeded again
		{delivery{id: "d2", attempt: 1}, 500},
		{delivery{id: "d2", attempt: 2}, 200},
	} {
		status, _ := send(t, url, step.d)
		require.Equal(t, step.status, status, "step %d", i)
	}
	require.Equal(t, receiver.Stats{
		Requests: 5, Unverified: 5, Succeeded: 3, Failed: 2, Deliveries: 2, Delivered: 2,
		DuplicateAttempts: 1, DuplicateSuccesses: 1,
	}, rc.Stats())
}

func TestHangUntilClientGivesUp(t *testing.T) {
	t.Parallel()
	rc, url := start(t, receiver.Config{Mode: receiver.ModeHang})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	req := delivery{id: "d1", attempt: 1}.request(t, ctx, url)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	require.Eventually(t, func() bool { return rc.Stats().Hung == 1 }, 5*time.Second, 5*time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("hang answered: %v", err)
	default:
	}
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	require.Equal(t, receiver.Stats{Requests: 1, Unverified: 1, Hung: 1, Deliveries: 1}, rc.Stats())
}

func TestCloseReleasesHang(t *testing.T) {
	t.Parallel()
	rc, url := start(t, receiver.Config{Mode: receiver.ModeHang})
	type result struct {
		status int
		err    error
	}
	res := make(chan result, 1)
	req := delivery{id: "d1", attempt: 1}.request(t, context.Background(), url)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			res <- result{err: err}
			return
		}
		resp.Body.Close()
		res <- result{status: resp.StatusCode}
	}()
	require.Eventually(t, func() bool { return rc.Stats().Hung == 1 }, 5*time.Second, 5*time.Millisecond)
	rc.Close()
	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, http.StatusServiceUnavailable, r.status)
}

func TestConcurrentCounts(t *testing.T) {
	t.Parallel()
	secret, key := newKey(t)
	rc, url := start(t, receiver.Config{Secrets: []string{secret}})
	const n = 50
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		req := delivery{id: "d" + strconv.Itoa(i), attempt: 1, keys: [][]byte{key}}.request(t, context.Background(), url)
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				statuses[i] = resp.StatusCode
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	for i, status := range statuses {
		require.Equal(t, 200, status, "request %d", i)
	}
	require.Equal(t, receiver.Stats{Requests: n, GoodSignatures: n, Succeeded: n, Deliveries: n, Delivered: n}, rc.Stats())
}

func TestStatsEndpointAndMethods(t *testing.T) {
	t.Parallel()
	_, url := start(t, receiver.Config{})
	send(t, url, delivery{id: "d1", attempt: 1})

	resp, err := http.Get(url + "/hook")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	resp, err = http.Get(url + "/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s receiver.Stats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	require.Equal(t, receiver.Stats{Requests: 1, Unverified: 1, Succeeded: 1, Deliveries: 1, Delivered: 1}, s)
}

func TestLogLine(t *testing.T) {
	t.Parallel()
	secret, key := newKey(t)
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	_, url := start(t, receiver.Config{Secrets: []string{secret}, Mode: receiver.ModeFail, Logger: logger})
	send(t, url, delivery{id: "del_42", attempt: 3, keys: [][]byte{key}})
	send(t, url, delivery{id: "del_43", attempt: 1})

	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	for _, want := range []string{"method=POST", "path=/hook", "delivery=del_42", "attempt=3", "verdict=good", "status=500"} {
		require.Contains(t, lines[0], want)
	}
	for _, want := range []string{"delivery=del_43", "verdict=bad", "error="} {
		require.Contains(t, lines[1], want)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []receiver.Config{
		{Mode: "sometimes"},
		{Secrets: []string{"not-a-secret"}},
		{Secrets: []string{webhook.NewSecret(), "whsec_short"}},
		{Status: 42},
		{FailFirst: -1},
		{RetryAfter: -1},
	} {
		_, err := receiver.New(cfg)
		require.Error(t, err, "%+v", cfg)
	}
}
