// Package queue is hookline's RabbitMQ side: the connection that survives
// broker restarts, the topology, the publisher with confirms and the
// consumer loop.
package queue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNotConnected is returned while the broker is unreachable.
var ErrNotConnected = errors.New("rabbitmq is not connected")

// Conn keeps one AMQP connection open, redialling with backoff when the
// broker goes away. Processes keep running while it is down; readiness
// reports it.
type Conn struct {
	url    string
	log    *slog.Logger
	onOpen []func(*amqp.Connection)

	mu   sync.RWMutex
	conn *amqp.Connection
}

// NewConn returns a Conn for url; Run opens it.
func NewConn(url string, log *slog.Logger) *Conn {
	return &Conn{url: url, log: log}
}

// OnOpen registers f to run on every (re)connection, before Connected turns
// true. Call it before Run.
func (c *Conn) OnOpen(f func(*amqp.Connection)) { c.onOpen = append(c.onOpen, f) }

// Run dials until ctx ends, redialling after every loss. It closes the
// connection when ctx ends.
func (c *Conn) Run(ctx context.Context) error {
	backoff := 200 * time.Millisecond
	for {
		conn, err := amqp.DialConfig(c.url, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US"})
		if err != nil {
			c.log.Warn("rabbitmq dial failed", "error", err, "retry_in", backoff.String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 200 * time.Millisecond
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		for _, f := range c.onOpen {
			f(conn)
		}
		c.set(conn)
		c.log.Info("rabbitmq connected")
		select {
		case <-ctx.Done():
			c.set(nil)
			_ = conn.Close()
			return nil
		case amqpErr := <-closed:
			c.set(nil)
			c.log.Warn("rabbitmq connection lost", "error", amqpErr)
		}
	}
}

func (c *Conn) set(conn *amqp.Connection) {
	c.mu.Lock()
	c.conn = conn
	c.mu.Unlock()
}

// Current returns the open connection or ErrNotConnected.
func (c *Conn) Current() (*amqp.Connection, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.conn == nil || c.conn.IsClosed() {
		return nil, ErrNotConnected
	}
	return c.conn, nil
}

// Check reports whether the broker is reachable; it is a readiness check.
func (c *Conn) Check(context.Context) error {
	_, err := c.Current()
	return err
}
