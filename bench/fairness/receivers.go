package main

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// receiver is a healthy endpoint: it answers 200 at once and keeps, for
// each sequence number of its stream, the latency of the first receipt
// from the event's scheduled publish time (the "ts" of its data).
//
// Shared by many tenants (e), each tenant's webhook has a path of its own,
// /hook/<tenant index>, and the receiver counts the requests whose event
// was published by another tenant ("tenant_index" of its data): that
// would be one tenant's event delivered to another's endpoint.
type receiver struct {
	url      string
	srv      *http.Server
	lat      []atomic.Int64 // nanoseconds, 0: not received; indexed by seq
	requests atomic.Int64   // every POST answered, duplicates included
	dups     atomic.Int64
	crossed  atomic.Int64 // requests on /hook/<i> not carrying tenant i's event
}

// newReceiver listens on a loopback port for a stream of n events.
func newReceiver(n int) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{url: "http://" + ln.Addr().String() + "/hook", lat: make([]atomic.Int64, n)}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	now := time.Now()
	r.requests.Add(1)
	seq, ok1 := field(body, `"seq":`)
	ts, ok2 := field(body, `"ts":`)
	if i, ok := pathTenant(req.URL.Path); ok {
		if t, ok := field(body, `"tenant_index":`); !ok || t != i {
			r.crossed.Add(1)
		}
	}
	if ok1 && ok2 && seq >= 0 && seq < int64(len(r.lat)) {
		lat := max(now.UnixNano()-ts, 1)
		if !r.lat[seq].CompareAndSwap(0, lat) {
			r.dups.Add(1)
		}
	}
	w.WriteHeader(http.StatusOK)
}

// pathTenant reads the tenant index of a path /hook/<index>.
func pathTenant(path string) (int64, bool) {
	rest, ok := strings.CutPrefix(path, "/hook/")
	if !ok {
		return 0, false
	}
	i, err := strconv.ParseInt(rest, 10, 64)
	return i, err == nil
}

// received counts the sequence numbers received at least once.
func (r *receiver) received() int {
	n := 0
	for i := range r.lat {
		if r.lat[i].Load() != 0 {
			n++
		}
	}
	return n
}

// latencies returns the latency of every sequence number, 0 for those not
// received.
func (r *receiver) latencies() []time.Duration {
	out := make([]time.Duration, len(r.lat))
	for i := range r.lat {
		out[i] = time.Duration(r.lat[i].Load())
	}
	return out
}

func (r *receiver) close() { _ = r.srv.Close() }

// field reads the integer after key in body (the first occurrence: the
// event's data is the only object in the envelope with these keys).
func field(body []byte, key string) (int64, bool) {
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(body[i+len(key):], " ")
	j := bytes.IndexAny(rest, ",} ")
	if j < 0 {
		return 0, false
	}
	v, err := strconv.ParseInt(string(rest[:j]), 10, 64)
	return v, err == nil
}

// hangingListener accepts TCP connections and never answers: each request
// holds its connection until the worker's attempt times out and closes it.
// Every connection is one request (nothing is answered, so none is
// reused), so the connections accepted are the attempts that reached it.
type hangingListener struct {
	url      string
	ln       net.Listener
	accepted atomic.Int64
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	closed   bool
	wg       sync.WaitGroup
}

func newHangingListener() (*hangingListener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hangingListener{url: "http://" + ln.Addr().String() + "/hook", ln: ln, conns: map[net.Conn]struct{}{}}
	h.wg.Add(1)
	go h.serve()
	return h, nil
}

func (h *hangingListener) serve() {
	defer h.wg.Done()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			return // closed
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			_ = c.Close()
			return
		}
		h.conns[c] = struct{}{}
		h.mu.Unlock()
		h.accepted.Add(1)
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			_, _ = io.Copy(io.Discard, c) // until the client gives up, or close
			h.mu.Lock()
			delete(h.conns, c)
			h.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// close stops accepting and drops every held connection, so that the
// worker's requests fail at once instead of running into their timeout.
func (h *hangingListener) close() {
	_ = h.ln.Close()
	h.mu.Lock()
	h.closed = true
	for c := range h.conns {
		_ = c.Close()
	}
	h.mu.Unlock()
	h.wg.Wait()
}
