// Package queuetest gives each test its own RabbitMQ topology under a unique
// prefix on the local broker, or on the local three-node cluster, deleted
// when the test ends.
package queuetest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/testwait"
)

// URL is the broker used by tests: $TEST_AMQP_URL or the local default.
func URL() string {
	if u := os.Getenv("TEST_AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// NewTopology returns a topology with a fresh prefix, declared on the
// broker and deleted when t ends.
func NewTopology(t testing.TB) queue.Topology {
	t.Helper()
	return NewTopologyAt(t, URL(), 0)
}

// Conn returns a running connection to url (URL() when empty), closed when t
// ends.
func Conn(t testing.TB, url string) *queue.Conn {
	t.Helper()
	if url == "" {
		url = URL()
	}
	c := queue.NewConn(url, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// WaitConnected blocks until c is connected or 10 s pass.
func WaitConnected(t testing.TB, c *queue.Conn) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, func() bool { return c.Check(context.Background()) == nil },
		"rabbitmq connection open")
}

// Depth returns the number of ready messages in queue name.
func Depth(t testing.TB, name string) int {
	t.Helper()
	var n int
	WithChannel(t, func(ch *amqp.Channel) error {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		n = q.Messages
		return err
	})
	return n
}

// Publish sends msg to exchange with routing key key, on a confirm-mode
// channel of its own, and waits for the broker's confirm
// (queue.WaitConfirms); it fails t when the broker refuses the message.
// It is for messages the hookline publisher would not send as they are,
// such as malformed ones.
func Publish(t testing.TB, exchange, key string, msg amqp.Publishing) {
	t.Helper()
	WithChannel(t, func(ch *amqp.Channel) error {
		if err := ch.Confirm(false); err != nil {
			return err
		}
		ctx := context.Background()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, msg)
		if err != nil {
			return err
		}
		return queue.WaitConfirms(ctx, dc)
	})
}

// WithChannel runs f on a channel of a connection of its own, failing t
// when the broker cannot be reached or f fails.
func WithChannel(t testing.TB, f func(*amqp.Channel) error) {
	t.Helper()
	WithChannelAt(t, URL(), f)
}
