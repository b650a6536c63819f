// Command otlpsink is an OTLP/HTTP trace receiver that decodes every
// export and discards it, counting the spans: the trace backend of the
// tracing benchmarks, so that hookline's cost of exporting is measured
// without a real backend's. GET /count answers the spans received so far.
//
//	go run ./bench/otlpsink -addr 127.0.0.1:4318
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hookline/hookline/internal/tracing/otlptest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:4318", "listen address (OTLP/HTTP: POST /v1/traces)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "otlpsink:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string) error {
	rcv := otlptest.New(false)
	mux := http.NewServeMux()
	mux.Handle("POST /v1/traces", rcv)
	mux.HandleFunc("GET /count", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, rcv.Count()) })
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("otlpsink: receiving OTLP/HTTP traces on http://%s/v1/traces", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Printf("otlpsink: %d spans received", rcv.Count())
	return nil
}
