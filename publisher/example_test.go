package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/queue"
	"github.com/hookline/hookline/internal/queue/queuetest"
	"github.com/hookline/hookline/publisher"
)

// The example runs against a fresh database holding one tenant with one
// webhook subscribed to order events, and its own queue prefix.
var (
	databaseURL string
	amqpPrefix  = "test-example-" + uuid.NewString()[:8]
	tenantID    = uuid.Must(uuid.NewV7())
)

func TestMain(m *testing.M) {
	url, drop, err := dbtest.Create(true)
	if err != nil {
		log.Fatal(err)
	}
	databaseURL = url
	if err := seed(url); err != nil {
		drop()
		log.Fatal(err)
	}
	code := m.Run()
	drop()
	deleteTopology()
	os.Exit(code)
}

func seed(url string) error {
	ctx := context.Background()
	pool, err := db.Open(ctx, url, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, 'example', 1000, 100, 1000, 100)`, tenantID)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		VALUES ($1, $2, 'https://8.8.8.8/hooks', '{order.*}', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', '{}', '{}', '{}')`,
		uuid.Must(uuid.NewV7()), tenantID)
	return err
}

func deleteTopology() {
	conn, err := amqp.Dial(queuetest.URL())
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	_ = queue.Topology{Prefix: amqpPrefix}.Delete(ch)
}

func ExamplePublisher_PublishEvent() {
	ctx := context.Background()
	p, err := publisher.Open(ctx, publisher.Config{
		DatabaseURL: databaseURL,
		AMQPURL:     queuetest.URL(),
		AMQPPrefix:  amqpPrefix,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	order := publisher.Event{
		TenantID:       tenantID,
		EventType:      "order.created",
		Data:           map[string]any{"order_id": 42, "total": "19.90"},
		Source:         "checkout",
		IdempotencyKey: "order-42-created",
	}
	res, err := p.PublishEvent(ctx, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deliveries:", res.Deliveries, "replayed:", res.Replayed)

	// The same key with the same event is a replay: nothing new is created.
	res, err = p.PublishEvent(ctx, order)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deliveries:", res.Deliveries, "replayed:", res.Replayed)

	// No webhook subscribes to user events.
	res, err = p.PublishEvent(ctx, publisher.Event{TenantID: tenantID, EventType: "user.created", Data: map[string]any{"id": 7}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deliveries:", res.Deliveries)

	// Output:
	// deliveries: 1 replayed: false
	// deliveries: 1 replayed: true
	// deliveries: 0
}

func ExamplePublisher_PublishEvent_errors() {
	ctx := context.Background()
	p, err := publisher.Open(ctx, publisher.Config{DatabaseURL: databaseURL, AMQPURL: queuetest.URL(), AMQPPrefix: amqpPrefix})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()

	_, err = p.PublishEvent(ctx, publisher.Event{TenantID: tenantID, EventType: "order.created", Data: map[string]any{}, Priority: "urgent"})
	fmt.Println(err)

	first := publisher.Event{TenantID: tenantID, EventType: "order.paid", Data: map[string]any{"n": 1}, IdempotencyKey: "k-1"}
	if _, err := p.PublishEvent(ctx, first); err != nil {
		log.Fatal(err)
	}
	first.Data = map[string]any{"n": 2}
	_, err = p.PublishEvent(ctx, first)
	fmt.Println(errors.Is(err, publisher.ErrIdempotencyConflict))

	// Output:
	// priority: must be high, normal or low, got "urgent"
	// true
}
