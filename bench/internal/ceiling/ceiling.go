// Package ceiling measures the bare throughput of the parts hookline is
// built from, on this machine, so that end-to-end figures can be read
// against them: RabbitMQ publish-with-confirms plus consume on a quorum
// queue, single-row Postgres commits, and keep-alive HTTP POSTs to a local
// receiver.
package ceiling

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/queue"
)

// RabbitMQ publishes n messages of size bytes to a fresh durable quorum
// queue (as hookline's work queues are) with publisher confirms, window
// messages unconfirmed at most, while one consumer with manual acks and
// prefetch window takes them; it returns messages per second from the
// first publish to the last ack.
func RabbitMQ(ctx context.Context, url string, n, size, window int) (float64, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return 0, fmt.Errorf("connect to rabbitmq: %w", err)
	}
	defer conn.Close()
	pubCh, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	subCh, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "ceiling-" + hex.EncodeToString(b)
	if _, err := pubCh.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return 0, fmt.Errorf("declare queue: %w", err)
	}
	defer func() { _, _ = pubCh.QueueDelete(name, false, false, false) }()
	if err := pubCh.Confirm(false); err != nil {
		return 0, err
	}
	if err := subCh.Qos(window, 0, false); err != nil {
		return 0, err
	}
	msgs, err := subCh.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			select {
			case m, ok := <-msgs:
				if !ok {
					done <- fmt.Errorf("consumer closed after %d", i)
					return
				}
				if err := m.Ack(false); err != nil {
					done <- err
					return
				}
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
		done <- nil
	}()
	body := bytes.Repeat([]byte("x"), size)
	start := time.Now()
	// The broker confirms in publish order: the oldest unconfirmed
	// publish is the one to wait for.
	unconfirmed := make([]*amqp.DeferredConfirmation, 0, window)
	for i := 0; i < n; i++ {
		if len(unconfirmed) >= window {
			if err := queue.WaitConfirms(ctx, unconfirmed[0]); err != nil {
				return 0, err
			}
			unconfirmed = unconfirmed[1:]
		}
		dc, err := pubCh.PublishWithDeferredConfirmWithContext(ctx, "", name, false, false,
			amqp.Publishing{DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: body})
		if err != nil {
			return 0, err
		}
		unconfirmed = append(unconfirmed, dc)
	}
	if err := queue.WaitConfirms(ctx, unconfirmed...); err != nil {
		return 0, err
	}
	if err := <-done; err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// Postgres commits one single-row INSERT per transaction from conns
// connections for d and returns commits per second.
func Postgres(ctx context.Context, url string, conns int, d time.Duration) (float64, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = int32(conns) //nolint:gosec // a connection count from a flag
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS ceiling (id bigserial PRIMARY KEY, v text NOT NULL)`); err != nil {
		return 0, err
	}
	defer func() { _, _ = pool.Exec(context.Background(), `DROP TABLE IF EXISTS ceiling`) }()
	var commits atomic.Int64
	var firstErr error
	var once sync.Once
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				if _, err := pool.Exec(runCtx, `INSERT INTO ceiling (v) VALUES ('0123456789abcdef')`); err != nil {
					if runCtx.Err() == nil {
						once.Do(func() { firstErr = err })
					}
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(commits.Load()) / time.Since(start).Seconds(), nil
}

// HTTP POSTs size-byte bodies over keep-alive connections from clients
// goroutines to a local server answering 200 at once, for d, and returns
// requests per second.
func HTTP(ctx context.Context, clients, size int, d time.Duration) (float64, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}}
	url := "http://" + ln.Addr().String() + "/hook"
	body := bytes.Repeat([]byte("x"), size)
	var reqs atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				req, _ := http.NewRequestWithContext(runCtx, http.MethodPost, url, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				res, err := client.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					reqs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(reqs.Load()) / time.Since(start).Seconds(), nil
}
