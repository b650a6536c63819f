// Package queue is hookline's RabbitMQ side: the connection that survives
// broker restarts, the topology, the publisher with confirms and the
// consumer loop.
package queue

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrNotConnected is returned while the broker is unreachable.
var ErrNotConnected = errors.New("rabbitmq is not connected")

// Conn keeps one AMQP connection open to one node of a broker (a single
// node, or any node of a cluster), redialling with backoff when it goes
// away. Processes keep running while it is down; readiness reports it.
//
// With several nodes, each Conn starts at a random one, so that the
// processes of a fleet spread their connections over the cluster, and
// after a loss dials the next node at once, going round the list; it
// backs off only when every node refused it. What a lost connection held
// is not lost: publishes awaiting their confirm fail (the callers publish
// them again) and unacknowledged messages go back to their queues.
type Conn struct {
	urls   []string
	log    *slog.Logger
	onOpen []func(*amqp.Connection)

	mu   sync.RWMutex
	conn *amqp.Connection
	node string
}

// NewConn returns a Conn for urls, one amqp:// URL or a comma-separated
// list of the URLs of a cluster's nodes (one vhost and user); Run opens
// it.
func NewConn(urls string, log *slog.Logger) *Conn {
	return &Conn{urls: SplitURLs(urls), log: log}
}

// SplitURLs splits a comma-separated list of URLs, dropping blanks around
// them. A comma inside a URL (in a password) must be written %2C.
func SplitURLs(s string) []string {
	var out []string
	for u := range strings.SplitSeq(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// OnOpen registers f to run on every (re)connection, before Connected turns
// true. Call it before Run.
func (c *Conn) OnOpen(f func(*amqp.Connection)) { c.onOpen = append(c.onOpen, f) }

// Run dials until ctx ends, redialling after every loss. It closes the
// connection when ctx ends.
func (c *Conn) Run(ctx context.Context) error {
	if len(c.urls) == 0 {
		return errors.New("rabbitmq: no url")
	}
	next := rand.IntN(len(c.urls)) //nolint:gosec // spreads connections, no secret
	backoff, failed := 200*time.Millisecond, 0
	for {
		addr := c.urls[next]
		next = (next + 1) % len(c.urls)
		conn, err := amqp.DialConfig(addr, amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US"})
		if err != nil {
			failed++
			if failed%len(c.urls) != 0 {
				c.log.Warn("rabbitmq dial failed; trying the next node", "node", nodeOf(addr), "error", err)
				continue
			}
			c.log.Warn("rabbitmq dial failed", "node", nodeOf(addr), "error", err, "retry_in", backoff.String())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff, failed = 200*time.Millisecond, 0
		if !c.serve(ctx, conn, nodeOf(addr)) {
			return nil
		}
	}
}

// serve runs the OnOpen functions on conn and offers it until it closes
// (true) or ctx ends (false).
func (c *Conn) serve(ctx context.Context, conn *amqp.Connection, node string) bool {
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	for _, f := range c.onOpen {
		f(conn)
	}
	c.set(conn, node)
	c.log.Info("rabbitmq connected", "node", node)
	select {
	case <-ctx.Done():
		c.set(nil, "")
		_ = conn.Close()
		return false
	case amqpErr := <-closed:
		c.set(nil, "")
		c.log.Warn("rabbitmq connection lost", "node", node, "error", amqpErr)
		return true
	}
}

// nodeOf names a node by the host and port of its URL, without the
// credentials.
func nodeOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	return u.Host
}

func (c *Conn) set(conn *amqp.Connection, node string) {
	c.mu.Lock()
	c.conn, c.node = conn, node
	c.mu.Unlock()
}

// Node is the host:port of the node connected to, or "" while not
// connected.
func (c *Conn) Node() string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.conn == nil || c.conn.IsClosed() {
		return ""
	}
	return c.node
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
