package verify

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// bombSize is what the endpoints of the incident answered with: 9 MiB of
// response headers.
const bombSize = 9 << 20

// newHeaderBomb starts a raw HTTP/1.1 endpoint answering every request with
// a status line and bombSize bytes of headers. completed counts the
// answers it managed to write whole before the client hung up.
func newHeaderBomb(t *testing.T) (url string, completed *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	completed = new(atomic.Int64)
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	serve := func(c net.Conn) {
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		line := "X-Bomb: " + strings.Repeat("b", 1000) + "\r\n"
		n, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		for total := n; total < bombSize && err == nil; total += n {
			n, err = io.WriteString(c, line)
		}
		if err == nil {
			_, err = io.WriteString(c, "Content-Length: 0\r\n\r\n")
		}
		if err == nil {
			completed.Add(1)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); serve(c) }()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook", completed
}

// An endpoint answering a challenge with 9 MiB of headers fails the check,
// which says why, and the checker hangs up after 64 KiB instead of reading
// them all.
func TestCheckRefusesHeaderBomb(t *testing.T) {
	t.Parallel()
	url, completed := newHeaderBomb(t)
	res, err := testChecker().Check(context.Background(), hookAt(url))
	require.NoError(t, err)
	require.False(t, res.Verified())
	require.Zero(t, res.StatusCode)
	require.Contains(t, res.Problem, "the endpoint's answer could not be read (headers over 64 KiB, or not valid HTTP): ")
	require.Contains(t, res.Problem, "exceeded 65536 bytes")
	require.Zero(t, completed.Load(), "the checker hung up before the end of the headers")
}

// An endpoint answering with an endless body is judged on its first
// kilobyte, and the checker does not read on.
func TestCheckReadsOnlyTheStartOfABodyBomb(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	e := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ string) {
		chunk := []byte(strings.Repeat("x", 64<<10))
		for sent.Load() < bombSize {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	res, err := testChecker().Check(context.Background(), hookAt(e.URL))
	require.NoError(t, err)
	require.Equal(t, `the endpoint answered 200 OK without echoing the challenge, body "`+strings.Repeat("x", quotedBytes)+`"...`, res.Problem)
	e.Close() // waits for the handler: it stopped when the checker hung up
	require.Less(t, sent.Load(), int64(bombSize), "the checker hung up before the end of the body")
}
