// Command receiver is a webhook endpoint for demos, tests and load runs. It
// verifies both of hookline's signatures on every POST, answers as its flags
// say, logs one line per request (unless -quiet) and a summary of its counts
// every 5 s and when it stops on SIGINT or SIGTERM. GET /stats returns the
// counts as JSON.
//
//	go run ./bench/receiver -secret whsec_... -mode ok
//	go run ./bench/receiver -secret whsec_old,whsec_new -mode flaky -fail-first 2
//	go run ./bench/receiver -mode 429 -retry-after 5 -quiet
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hookline/hookline/bench/internal/receiver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "receiver:", err)
		os.Exit(1)
	}
}

// secretList is a flag that may be repeated and holds comma-separated values.
type secretList []string

func (s *secretList) String() string { return strings.Join(*s, ",") }

func (s *secretList) Set(v string) error {
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}

// options are the command line: the receiver's Config and the process's own
// settings.
type options struct {
	cfg   receiver.Config
	addr  string
	quiet bool
}

func parseFlags(args []string) (options, error) {
	var o options
	var secrets secretList
	fs := flag.NewFlagSet("receiver", flag.ContinueOnError)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:9000", "listen address")
	fs.Var(&secrets, "secret", "whsec_ secret to verify with; repeat or comma-separate for a rotation (none: do not verify)")
	mode := fs.String("mode", string(receiver.ModeOK), "ok (200), fail (500), flaky (500 then 200), hang (never answer) or 429")
	fs.IntVar(&o.cfg.FailFirst, "fail-first", 2, "flaky: requests of each delivery to fail before answering 200")
	fs.IntVar(&o.cfg.RetryAfter, "retry-after", 1, "Retry-After seconds on 429 and 503 answers (0: no header)")
	fs.IntVar(&o.cfg.Status, "status", 0, "answer every request with this status code, whatever the mode (0: by mode)")
	fs.BoolVar(&o.cfg.RejectBadSignatures, "reject", false, "answer 401 when a signature does not verify")
	fs.BoolVar(&o.quiet, "quiet", false, "no per-request log lines, only summaries")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.cfg.Secrets, o.cfg.Mode = secrets, receiver.Mode(*mode)
	return o, nil
}

func run(ctx context.Context, args []string) error {
	o, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, nil))
	cfg := o.cfg
	if !o.quiet {
		cfg.Logger = log
	}
	rc, err := receiver.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: rc, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String(), "mode", string(cfg.Mode), "secrets", len(cfg.Secrets))

	err = summarize(ctx, rc, log, serveErr)
	rc.Close()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shutdownCtx); serr != nil && err == nil {
		err = fmt.Errorf("shutdown: %w", serr)
	}
	logSummary(log, "final", rc.Stats())
	return err
}

// summarize logs the counts every 5 s until ctx ends (nil) or the server
// fails (its error).
func summarize(ctx context.Context, rc *receiver.Receiver, log *slog.Logger, serveErr <-chan error) error {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-serveErr:
			if errors.Is(err, http.ErrServerClosed) {
				return nil
			}
			return fmt.Errorf("serve: %w", err)
		case <-tick.C:
			logSummary(log, "summary", rc.Stats())
		}
	}
}

func logSummary(log *slog.Logger, msg string, s receiver.Stats) {
	log.Info(msg, "requests", s.Requests, "good_signatures", s.GoodSignatures,
		"bad_signatures", s.BadSignatures, "unverified", s.Unverified,
		"succeeded", s.Succeeded, "failed", s.Failed, "hung", s.Hung,
		"deliveries", s.Deliveries, "delivered", s.Delivered,
		"duplicate_attempts", s.DuplicateAttempts, "duplicate_successes", s.DuplicateSuccesses)
}
