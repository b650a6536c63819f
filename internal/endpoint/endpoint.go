// Package endpoint holds what the delivery client and the verification
// client agree on about tenants' endpoints' answers: how much of them is
// read, and how a failure is told apart (no answer, or an answer that could
// not be read).
package endpoint

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync/atomic"
	"syscall"
)

// MaxHeaderBytes bounds the status line and headers read of an answer
// (HTTP/1, and HTTP/2's header list); Go's default, 10 MB, let ten
// endpoints answering 9 MiB of headers take a worker from 21 MB to 722 MB.
// H2StreamWindow bounds the body data HTTP/2 buffers ahead of our reads on
// one stream (Go's default: 4 MiB), ample for the 1 KiB sample read.
const (
	MaxHeaderBytes = 64 << 10
	H2StreamWindow = 64 << 10
)

// TraceReached sets reached once the request is written or the first byte
// of an answer is read, so that an answer that could not be read is told
// from no answer. It sets no Got1xxResponse: without one, the headers of
// informational responses count against the same limit as the final one's.
func TraceReached(req *http.Request, reached *atomic.Bool) *http.Request {
	return req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				reached.Store(true)
			}
		},
		GotFirstResponseByte: func() { reached.Store(true) },
	}))
}

// BrokenConnection reports whether err is the connection breaking (closed,
// reset or failed underneath) rather than the client refusing an answer
// (an HTTP/2 header block over the limit is a connection error of the
// protocol, not of the network).
func BrokenConnection(err error) bool {
	var opErr *net.OpError
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &opErr) ||
		errors.Is(err, syscall.ECONNRESET)
}

// Cause is the innermost message of a client error, without the method and
// URL the client puts around it.
func Cause(err error) string {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err.Error()
	}
	return err.Error()
}
