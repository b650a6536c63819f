package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/retry"
	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
	"github.com/hookline/hookline/internal/wire"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	expired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want retry.Category
	}{
		{"ssrf", context.Background(), &net.OpError{Op: "dial", Err: fmt.Errorf("%w: 127.0.0.1", netguard.ErrBlocked)}, retry.SSRFBlocked},
		{"dns", context.Background(), &url.Error{Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x"}}}, retry.DNS},
		{"dns timeout", context.Background(), &net.DNSError{Err: "timeout", IsTimeout: true}, retry.Timeout},
		{"unknown authority", context.Background(), &url.Error{Err: &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}}, retry.SSL},
		{"hostname", context.Background(), x509.HostnameError{Host: "x"}, retry.SSL},
		{"record header", context.Background(), tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, retry.SSL},
		{"alert", context.Background(), tls.AlertError(40), retry.SSL},
		{"deadline", context.Background(), context.DeadlineExceeded, retry.Timeout},
		{"expired context", expired, errors.New("whatever"), retry.Timeout},
		{"refused", context.Background(), &net.OpError{Op: "dial", Err: errors.New("connection refused")}, retry.Network},
		{"reset", context.Background(), errors.New("connection reset by peer"), retry.Network},
	}
	for _, c := range cases {
		require.Equal(t, c.want, classify(c.ctx, c.err), c.name)
	}
}

func TestHostKey(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"https://Example.com/a?b":   "https://example.com",
		"https://example.com:8443/": "https://example.com:8443",
		"http://127.0.0.1:9000":     "http://127.0.0.1:9000",
		"http://[::1]:80/x#y":       "http://[::1]:80",
		"https://h.test?q=1":        "https://h.test",
	} {
		require.Equal(t, want, hostKey(raw), raw)
	}
}

func TestHostLimiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := newHostLimiter(2, 20*time.Millisecond)
	a1, a2 := l.acquire(ctx, "a"), l.acquire(ctx, "a")
	require.NotNil(t, a1)
	require.NotNil(t, a2)
	require.Nil(t, l.acquire(ctx, "a"), "third concurrent request to one host")
	require.NotNil(t, l.acquire(ctx, "b"), "other hosts are not affected")
	l.release("a", a1)
	a3 := l.acquire(ctx, "a")
	require.NotNil(t, a3)

	// A request waits in the worker for a connection freed meanwhile.
	done := make(chan *time.Time)
	l.wait = 5 * time.Second
	go func() { done <- l.acquire(ctx, "a") }()
	l.release("a", a2)
	require.NotNil(t, <-done)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.Nil(t, l.acquire(cancelled, "a"), "no wait past the context")
}

// A request that found its host busy is deferred to the host's next
// estimated free connection: one every hold/max, handed out one after the
// other; requests in flight longer than the average stretch the estimate.
func TestHostFreeAtHandsOutTheNextConnections(t *testing.T) {
	t.Parallel()
	l := newHostLimiter(4, time.Millisecond)
	h := l.host("a")
	h.hold = 8 * time.Second
	now := time.Now()
	first := reserve(l, "a", uuid.New(), now)
	require.Equal(t, now.Add(2*time.Second), first)
	require.Equal(t, first.Add(2*time.Second), reserve(l, "a", uuid.New(), now))

	// A request in flight for 100 s: the host frees a connection every
	// 25 s. The two reservations before were served in the minute since.
	later := now.Add(time.Minute)
	started := later.Add(-100 * time.Second)
	h.started[&started] = struct{}{}
	require.Equal(t, later.Add(25*time.Second), reserve(l, "a", uuid.New(), later))
}

// stall puts max requests in flight to host, each started d before now,
// as a stall (the host's, or this machine's) leaves them; the returned
// func ends it: the requests come back, the latest after held.
func stall(l *hostLimiter, host string, now time.Time, d time.Duration) (end func(held time.Duration)) {
	h := l.host(host)
	var tokens []*time.Time
	for range l.max {
		start := now.Add(-d)
		tokens = append(tokens, &start)
		h.started[&start] = struct{}{}
	}
	return func(held time.Duration) {
		for _, tok := range tokens {
			delete(h.started, tok)
		}
		h.last = held
	}
}

// reserve is freeAt for a request whose parking, if it has one, is
// written at once.
func reserve(l *hostLimiter, host string, webhook uuid.UUID, now time.Time) time.Time {
	at, parked := l.freeAt(host, webhook, now)
	if parked {
		l.mu.Lock()
		l.hosts[host].writing--
		l.mu.Unlock()
	}
	return at
}

// Reservations are counted at the host's current pace: those handed out
// during a stall, at its pace, do not put a request deferred once the
// host is fast again behind them.
func TestHostReservationsFollowTheCurrentPace(t *testing.T) {
	t.Parallel()
	l := newHostLimiter(5, time.Millisecond)
	h := l.host("a")
	h.hold = time.Millisecond
	now := time.Now()
	end := stall(l, "a", now, 2*time.Second)
	var last time.Time
	for range 50 {
		last = reserve(l, "a", uuid.New(), now)
	}
	// 400 ms apart, as the stall shows the host: the 50th 20 s ahead.
	require.Equal(t, now.Add(20*time.Second), last)

	end(time.Millisecond)
	later := now.Add(100 * time.Millisecond)
	// One connection every 200 us: the 50 were served in the 100 ms since.
	require.Equal(t, later.Add(200*time.Microsecond), reserve(l, "a", uuid.New(), later))
}

// Parked reservations are reported outdated, once, when the host has
// become fast enough to serve what still waits within half of ParkAfter;
// not while it is as slow as when they were made.
func TestOutdatedHostReservations(t *testing.T) {
	t.Parallel()
	now := time.Now()
	a, b, c := uuid.New(), uuid.New(), uuid.New()

	t.Run("after a stall", func(t *testing.T) {
		t.Parallel()
		l := newHostLimiter(5, time.Millisecond)
		l.host("h").hold = time.Millisecond
		end := stall(l, "h", now, 2*time.Second)
		// c's reservation, 400 ms ahead, goes through the delay tiers, not
		// parked; a's and b's, from 1.2 s on, are parked.
		at, parked := l.freeAt("h", c, now)
		require.Equal(t, now.Add(400*time.Millisecond), at)
		require.False(t, parked)
		for i := range 20 {
			reserve(l, "h", []uuid.UUID{a, b}[i%2], now)
		}
		hooks, _ := l.outdated("h", now.Add(time.Second))
		require.Empty(t, hooks, "the stall goes on: its requests are still in flight")

		end(2 * time.Millisecond)
		hooks, step := l.outdated("h", now.Add(time.Second))
		require.ElementsMatch(t, []uuid.UUID{a, b}, hooks)
		require.Equal(t, 400*time.Microsecond, step, "the latest request's hold over 5 connections")
		require.Equal(t, 2*time.Millisecond, l.host("h").hold, "the moving average forgets the stall")
		hooks, _ = l.outdated("h", now.Add(time.Second))
		require.Empty(t, hooks, "reported once")
	})

	t.Run("once the parkings are written", func(t *testing.T) {
		t.Parallel()
		l := newHostLimiter(5, time.Millisecond)
		l.host("h").hold = time.Millisecond
		end := stall(l, "h", now, 2*time.Second)
		for range 10 {
			reserve(l, "h", a, now)
		}
		// b's deferral in the stall's last moment: its parking is not yet
		// in Postgres when the host answers fast again.
		at, parked := l.freeAt("h", b, now)
		require.True(t, parked)
		require.Equal(t, now.Add(4400*time.Millisecond), at)
		end(time.Millisecond)
		hooks, _ := l.outdated("h", now.Add(time.Second))
		require.Empty(t, hooks, "b's parking would keep its reservation")
		hooks, step := l.written("h", now.Add(time.Second))
		require.ElementsMatch(t, []uuid.UUID{a, b}, hooks)
		require.Equal(t, 200*time.Microsecond, step)
		hooks, _ = l.written("h", now.Add(time.Second))
		require.Empty(t, hooks, "reported once")
		require.Zero(t, l.host("h").writing)
	})

	t.Run("at most once per cooldown", func(t *testing.T) {
		t.Parallel()
		l := newHostLimiter(5, time.Millisecond)
		l.host("h").hold = time.Millisecond
		// stallAt parks a's deliveries in a 2-s stall at, ended at once by
		// a request of 1 ms, and asks for the outdated ones at.
		stallAt := func(at time.Time) []uuid.UUID {
			end := stall(l, "h", at, 2*time.Second)
			for range 20 {
				reserve(l, "h", a, at)
			}
			end(time.Millisecond)
			hooks, _ := l.outdated("h", at)
			return hooks
		}
		require.Equal(t, []uuid.UUID{a}, stallAt(now))
		// Another stall 5 s later: within the 10-s cooldown, not reported
		// until it has passed.
		require.Empty(t, stallAt(now.Add(5*time.Second)))
		hooks, _ := l.outdated("h", now.Add(10*time.Second))
		require.Equal(t, []uuid.UUID{a}, hooks)
		// A report within twice the cooldown of the one before doubles it:
		// the next may come 20 s later, not 10.
		require.Empty(t, stallAt(now.Add(25*time.Second)))
		hooks, _ = l.outdated("h", now.Add(30*time.Second))
		require.Equal(t, []uuid.UUID{a}, hooks)
		// One after a quiet spell of twice the cooldown brings it back to
		// 10 s.
		require.Equal(t, []uuid.UUID{a}, stallAt(now.Add(5*time.Minute)))
		require.Equal(t, hastenCooldown, l.host("h").cooldown)
	})

	t.Run("a hanging host", func(t *testing.T) {
		t.Parallel()
		l := newHostLimiter(5, time.Millisecond)
		h := l.host("h")
		h.hold, h.last = 10*time.Second, 10*time.Second
		// Four of its requests in flight, up to 6 s old, one every 2 s.
		for i := range 4 {
			start := now.Add(-time.Duration(i) * 2 * time.Second)
			h.started[&start] = struct{}{}
		}
		for range 10 {
			reserve(l, "h", a, now)
		}
		// Its fifth comes back at once (a 404, say): the others still
		// hang.
		h.last = time.Millisecond
		hooks, _ := l.outdated("h", now.Add(time.Second))
		require.Empty(t, hooks)
	})

	t.Run("a slow host as slow as it was", func(t *testing.T) {
		t.Parallel()
		l := newHostLimiter(5, time.Millisecond)
		h := l.host("h")
		h.hold, h.last = 3*time.Second, 3*time.Second
		for range 5 {
			reserve(l, "h", a, now)
		}
		// 5 reservations 600 ms apart; a second later 3.3 are left: 2 s.
		hooks, _ := l.outdated("h", now.Add(time.Second))
		require.Empty(t, hooks)
	})

	t.Run("reservations about to come", func(t *testing.T) {
		t.Parallel()
		l := newHostLimiter(5, time.Millisecond)
		l.host("h").hold = time.Millisecond
		end := stall(l, "h", now, time.Second)
		for range 6 {
			reserve(l, "h", a, now) // 200 ms apart: the last, 1.2 s ahead, parked
		}
		end(time.Millisecond)
		hooks, _ := l.outdated("h", now.Add(300*time.Millisecond))
		require.Empty(t, hooks, "the last parked one is due within ParkAfter")
		require.Empty(t, l.host("h").parked, "and is forgotten")
	})
}

func TestBuildRequest(t *testing.T) {
	t.Parallel()
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	task := wire.Task{DeliveryID: uuid.New(), EventID: uuid.New(), WebhookID: uuid.New(), Attempt: 3}
	j := job{EventType: "order.created", Source: "shop", IdemKey: "k-1", Data: []byte(`{"b":1,"a":2,"q":"a<b && c>d"}`),
		EventTime: time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC), CorrelationID: "corr-1",
		Secrets: []string{secret}, Headers: map[string]string{"X-Team": "pay"}}
	now := time.Unix(1_800_000_000, 0)
	body, h, err := buildRequest(task, j, now)
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf(`{"id":%q,"event_type":"order.created","timestamp":"2026-01-02T03:04:05.0000006Z","data":{"b":1,"a":2,"q":"a<b && c>d"},"source":"shop"}`,
		task.EventID), string(body), "the payload's bytes are kept, nothing HTML-escaped")
	want := map[string]string{
		"Content-Type": "application/json", "X-Webhook-Id": task.WebhookID.String(), "X-Webhook-Event": "order.created",
		"X-Webhook-Delivery": task.DeliveryID.String(), "X-Webhook-Attempt": "3", "X-Webhook-Timestamp": "1800000000",
		"X-Idempotency-Key": "k-1", "X-Correlation-Id": "corr-1", "Webhook-Id": task.EventID.String(),
		"Webhook-Timestamp": "1800000000", "X-Team": "pay",
	}
	for k, v := range want {
		require.Equal(t, v, h.Get(k), k)
	}
	require.NoError(t, signature.VerifyStandard(secret, h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature"), body, now, time.Minute))
	require.NoError(t, signature.VerifyLegacy(secret, h.Get("X-Webhook-Signature"), body, now, time.Minute))

	j.Secrets = []string{"not-a-secret"}
	_, _, err = buildRequest(task, j, now)
	require.Error(t, err)
}

func TestSenderRecordsResponseAndRefusesRedirects(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/elsewhere":
			t.Error("a redirect was followed")
		case "/busy":
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Header().Set("X-Long", strings.Repeat("h", 2000))
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(strings.Repeat("b", 3000)))
		}
	}))
	defer srv.Close()
	s := NewSender(SenderConfig{ConnectTimeout: time.Second, MaxConnsPerHost: 5, UserAgent: UserAgent}, netguard.Policy{AllowPrivate: true})
	send := func(path string) Response {
		res, err := s.Send(context.Background(), Request{URL: srv.URL + path, Body: []byte(`{}`), Header: http.Header{}, Timeout: 2 * time.Second})
		require.NoError(t, err)
		return res
	}
	ok := send("/")
	require.Equal(t, 201, ok.StatusCode)
	require.Empty(t, ok.Category)
	require.Len(t, ok.BodySample, SampleBytes)
	require.Len(t, ok.Header["X-Long"], maxStoredHeaderSz)

	redirect := send("/redirect")
	require.Equal(t, 302, redirect.StatusCode)
	require.Equal(t, retry.ClientError, redirect.Category)

	busy := send("/busy")
	require.Equal(t, retry.ServerError, busy.Category)
	require.Equal(t, 7*time.Second, busy.RetryAfter)

	blocked := NewSender(SenderConfig{ConnectTimeout: time.Second, MaxConnsPerHost: 5, UserAgent: UserAgent}, netguard.Policy{})
	res, err := blocked.Send(context.Background(), Request{URL: srv.URL, Body: []byte(`{}`), Header: http.Header{}, Timeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, retry.SSRFBlocked, res.Category)
	require.Zero(t, res.StatusCode)
}

func TestSenderHostLimit(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	arrived := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-hold
	}))
	defer srv.Close()
	defer close(hold)
	s := NewSender(SenderConfig{ConnectTimeout: time.Second, MaxConnsPerHost: 1, UserAgent: UserAgent}, netguard.Policy{AllowPrivate: true})
	go func() {
		_, _ = s.Send(context.Background(), Request{URL: srv.URL, Header: http.Header{}, Timeout: 10 * time.Second})
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request never reached the server")
	}
	// The only connection the host may have is held by the first request.
	_, err := s.Send(context.Background(), Request{URL: srv.URL, Header: http.Header{}, Timeout: time.Second})
	require.ErrorIs(t, err, errHostBusy, "a second request to a host at its limit is refused without sending")
	require.Empty(t, arrived, "the refused request never reached the server")
}

func TestPolicyOf(t *testing.T) {
	t.Parallel()
	p := policyOf(struct2retry(3))
	require.Equal(t, 3, p.MaxAttempts)
	require.Equal(t, time.Second, p.BaseDelay)
	require.Equal(t, []time.Duration{500 * time.Millisecond, 2 * time.Second}, p.Schedule)
	require.Equal(t, 45*time.Second, p.AttemptTimeout(2))
}

func struct2retry(attempts int) webhook.RetryConfig {
	return webhook.RetryConfig{MaxAttempts: attempts, BaseDelayMS: 1000, MaxDelayMS: 300000, BackoffMultiplier: 2,
		TimeoutMS: 30000, TimeoutGrowthFactor: 1.5, ScheduleMS: []int64{500, 2000}}
}

func TestSanitizeAndTruncate(t *testing.T) {
	t.Parallel()
	require.Equal(t, "ab", sanitize("a\x00b"))
	require.Equal(t, "Erreur \uFFFD", sanitize("Erreur \xe9"))
	require.Equal(t, "héllo", sanitize("héllo"))
	require.Equal(t, "h", truncate("hé", 2), "never cut inside a character")
	require.Equal(t, "hé", truncate("hé", 3))
	require.Equal(t, "abc", truncate("abc", 10))
}
