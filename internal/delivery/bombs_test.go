package delivery

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/netguard"
	"github.com/hookline/hookline/internal/retry"
)

// bombSize is what the endpoints of the incident answered with: 9 MiB of
// response headers (and here bodies of as much).
const bombSize = 9 << 20

// bombsPerEndpoint is how many attempts each bomb receives at once, as ten
// deliveries to one endpoint would.
const bombsPerEndpoint = 10

// headerBomb is a raw HTTP/1.1 endpoint answering every request with a
// status line and bombSize bytes of headers. It counts the answers it
// managed to write whole, before the client hung up.
type headerBomb struct {
	URL       string
	completed atomic.Int64
}

func newHeaderBomb(t *testing.T) *headerBomb {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &headerBomb{URL: "http://" + ln.Addr().String() + "/hook"}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); b.serve(c) }()
		}
	}()
	return b
}

func (b *headerBomb) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	line := "X-Bomb: " + strings.Repeat("b", 1000) + "\r\n"
	n, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n")
	total := int64(n)
	for total < bombSize && err == nil {
		n, err = io.WriteString(c, line)
		total += int64(n)
	}
	if err == nil {
		_, err = io.WriteString(c, "Content-Length: 0\r\n\r\n")
	}
	if err == nil {
		b.completed.Add(1)
	}
}

// bodyBomb answers 200 with bombSize bytes of body.
func bodyBomb(w http.ResponseWriter, _ *http.Request) {
	chunk := []byte(strings.Repeat("x", 64<<10))
	for sent := 0; sent < bombSize; sent += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// h2HeaderBomb answers 200 with bombSize bytes of headers.
func h2HeaderBomb(w http.ResponseWriter, _ *http.Request) {
	for i := range bombSize >> 20 {
		w.Header().Set("X-Bomb-"+strconv.Itoa(i), strings.Repeat("b", 1<<20))
	}
	w.WriteHeader(http.StatusOK)
}

func newH2Server(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// bombReport is what the helper process sends back.
type bombReport struct {
	Responses map[string][]Response
	// Alloc is the bytes allocated while the attempts ran: an upper bound
	// on how much the heap could grow.
	Alloc uint64
	// HeapPeak is the largest heap in use seen while they ran, sampled.
	HeapPeak, HeapBefore uint64
}

// Ten endpoints answering with 9 MiB of response headers took the worker
// from 21 MB to 722 MB. Endpoints answering header bombs and body bombs,
// over HTTP/1.1 and HTTP/2, each get ten attempts at once from a Sender in
// a process of its own; the process allocates a few MiB, not hundreds,
// the header bombs are failed attempts (server_error, saying why), and a
// bomb's client hangs up after the limit instead of reading it all.
func TestSenderMemoryStaysBoundedUnderBombs(t *testing.T) {
	t.Parallel()
	h1Headers := newHeaderBomb(t)
	h1Body := httptest.NewServer(http.HandlerFunc(bodyBomb))
	t.Cleanup(h1Body.Close)
	h2Headers := newH2Server(t, h2HeaderBomb)
	h2Body := newH2Server(t, bodyBomb)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: h2Body.Certificate().Raw})
	require.Equal(t, h2Body.Certificate().Raw, h2Headers.Certificate().Raw, "httptest servers share one certificate")
	targets := map[string]string{
		"h1_headers": h1Headers.URL, "h1_body": h1Body.URL,
		"h2_headers": h2Headers.URL, "h2_body": h2Body.URL,
	}
	rep := runBombHelper(t, targets, ca)
	t.Logf("helper process: %d MiB allocated during the attempts, heap %d MiB before, peak %d MiB",
		rep.Alloc>>20, rep.HeapBefore>>20, rep.HeapPeak>>20)

	for name, responses := range rep.Responses {
		require.Len(t, responses, bombsPerEndpoint, name)
		for _, res := range responses {
			if strings.HasSuffix(name, "_headers") {
				require.Zero(t, res.StatusCode, "%s: %+v", name, res)
				require.Equal(t, retry.ServerError, res.Category, "%s: %+v", name, res)
				require.Contains(t, res.Error, "headers over 64 KiB", name)
				continue
			}
			require.Equal(t, http.StatusOK, res.StatusCode, "%s: %+v", name, res)
			require.Len(t, res.BodySample, SampleBytes, name)
		}
	}
	require.Zero(t, h1Headers.completed.Load(), "the client hung up before the end of the headers")
	require.Less(t, rep.Alloc, uint64(48<<20), "allocated during 40 attempts to bombs")
	require.Less(t, rep.HeapPeak-min(rep.HeapPeak, rep.HeapBefore), uint64(32<<20), "heap growth while they ran")
}

// runBombHelper runs TestHelperSenderUnderBombs in a process of its own
// (so that no other test's allocations count) and returns its report.
func runBombHelper(t *testing.T, targets map[string]string, ca []byte) bombReport {
	t.Helper()
	raw, err := json.Marshal(targets)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperSenderUnderBombs$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HOOKLINE_BOMB_TARGETS="+string(raw), "HOOKLINE_BOMB_CA="+string(ca))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "helper process:\n%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if js, ok := strings.CutPrefix(line, "BOMB-REPORT "); ok {
			var rep bombReport
			require.NoError(t, json.Unmarshal([]byte(js), &rep))
			return rep
		}
	}
	t.Fatalf("no report from the helper process:\n%s", out)
	return bombReport{}
}

// TestHelperSenderUnderBombs is the helper process of
// TestSenderMemoryStaysBoundedUnderBombs; on its own it does nothing.
func TestHelperSenderUnderBombs(t *testing.T) {
	raw := os.Getenv("HOOKLINE_BOMB_TARGETS")
	if raw == "" {
		t.Skip("helper process of TestSenderMemoryStaysBoundedUnderBombs")
	}
	var targets map[string]string
	require.NoError(t, json.Unmarshal([]byte(raw), &targets))
	s := NewSender(SenderConfig{ConnectTimeout: 5 * time.Second, MaxConnsPerHost: bombsPerEndpoint, HostQueueWait: 10 * time.Second,
		UserAgent: UserAgent}, netguard.Policy{AllowPrivate: true})
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM([]byte(os.Getenv("HOOKLINE_BOMB_CA"))))
	s.client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}

	rep := bombReport{Responses: map[string][]Response{}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rep.HeapBefore = before.HeapInuse
	stop := make(chan struct{})
	sampled := make(chan uint64)
	go func() { sampled <- sampleHeapPeak(stop) }()

	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, url := range targets {
		for range bombsPerEndpoint {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.Send(context.Background(), Request{URL: url, Body: []byte(`{}`), Header: http.Header{}, Timeout: 30 * time.Second})
				if err != nil {
					res.Error = "send: " + err.Error()
				}
				mu.Lock()
				rep.Responses[name] = append(rep.Responses[name], res)
				mu.Unlock()
			}()
		}
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	close(stop)
	rep.HeapPeak = max(<-sampled, after.HeapInuse)
	rep.Alloc = after.TotalAlloc - before.TotalAlloc
	js, err := json.Marshal(rep)
	require.NoError(t, err)
	fmt.Println("BOMB-REPORT " + string(js))
}

// sampleHeapPeak returns the largest HeapInuse seen until stop closes.
func sampleHeapPeak(stop <-chan struct{}) uint64 {
	var peak uint64
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var ms runtime.MemStats
	for {
		runtime.ReadMemStats(&ms)
		peak = max(peak, ms.HeapInuse)
		select {
		case <-stop:
			return peak
		case <-tick.C:
		}
	}
}

// Only a request that reached its endpoint and was not cut off by the
// connection or a timeout is an unreadable answer.
func TestUnreadable(t *testing.T) {
	t.Parallel()
	refused := errors.New("net/http: server response headers exceeded 65536 bytes; aborted")
	cases := []struct {
		name string
		cat  retry.Category
		err  error
		want bool
	}{
		{"header limit", retry.Network, &url.Error{Op: "Post", URL: "http://x", Err: refused}, true},
		{"http2 compression error", retry.Network, errors.New("connection error: COMPRESSION_ERROR"), true},
		{"closed", retry.Network, &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, false},
		{"closed mid-answer", retry.Network, io.ErrUnexpectedEOF, false},
		{"reset", retry.Network, &net.OpError{Op: "read", Err: syscall.ECONNRESET}, false},
		{"timeout", retry.Timeout, refused, false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, unreadable(c.cat, c.err), c.name)
	}
}
