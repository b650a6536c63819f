package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
)

// startServer serves newHTTPServer(cfg) on a free local port: a handler
// that reads the whole body, then answers 204.
func startServer(t *testing.T, cfg config.API) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := newHTTPServer(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			http.Error(w, "body", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, srv.Close())
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	return ln.Addr().String()
}

// closedWithin reads conn until the server closes it, and fails the test
// when that takes longer than limit.
func closedWithin(t *testing.T, conn net.Conn, limit time.Duration) {
	t.Helper()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(limit)))
	_, err := io.Copy(io.Discard, conn)
	require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the server kept the connection open for %s", limit)
}

func timeouts(read, idle time.Duration) config.API {
	cfg := config.Default().API
	cfg.Addr = "127.0.0.1:0"
	cfg.ReadHeaderTimeout, cfg.ReadTimeout, cfg.IdleTimeout = config.Duration(read), config.Duration(read), config.Duration(idle)
	return cfg
}

// A client that sends its headers and then trickles (or withholds) the
// body loses its connection after api.read_timeout.
func TestSlowBodyIsCutOffAfterReadTimeout(t *testing.T) {
	t.Parallel()
	addr := startServer(t, timeouts(300*time.Millisecond, time.Minute))
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/events HTTP/1.1\r\nHost: api\r\nContent-Length: 1000\r\n\r\n{\"a\":")
	require.NoError(t, err)
	closedWithin(t, conn, 5*time.Second)
}

// A keep-alive connection with no next request is closed after
// api.idle_timeout.
func TestIdleConnectionIsClosedAfterIdleTimeout(t *testing.T) {
	t.Parallel()
	addr := startServer(t, timeouts(time.Minute, 300*time.Millisecond))
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: api\r\n\r\n")
	require.NoError(t, err)
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, res.StatusCode)
	require.False(t, res.Close, "kept alive")
	closedWithin(t, conn, 5*time.Second)
}

// The server listens where configured and keeps the header bound.
func TestHTTPServerSettings(t *testing.T) {
	t.Parallel()
	cfg := config.Default().API
	srv := newHTTPServer(cfg, http.NotFoundHandler())
	require.Equal(t, cfg.Addr, srv.Addr)
	require.Equal(t, 10*time.Second, srv.ReadHeaderTimeout)
	require.Equal(t, 30*time.Second, srv.ReadTimeout)
	require.Equal(t, 120*time.Second, srv.IdleTimeout)
	require.True(t, strings.HasPrefix(srv.Addr, "127.0.0.1:"))
}
