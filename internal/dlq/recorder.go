// Package dlq is the dead-letter side of hookline: it records what reaches
// the dead-letter queue (deliveries exhausted by workers, and poison
// messages that no worker could settle) and sweeps up exhausted deliveries
// whose dead letter never arrived.
package dlq

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/hookline/hookline/internal/delivery"
	"github.com/hookline/hookline/internal/metrics"
	"github.com/hookline/hookline/internal/outbox"
	"github.com/hookline/hookline/internal/queue"
)

// Recorder is the queue.Handler of the dead-letter queue.
type Recorder struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

// NewRecorder returns a recorder.
func NewRecorder(pool *pgxpool.Pool, log *slog.Logger) *Recorder {
	return &Recorder{pool: pool, log: log}
}

// recordSQL marks a dead-lettered delivery. One a worker exhausted is
// already exhausted and only gains its dead_lettered_at; a poison message's
// delivery is still pending or retrying and becomes exhausted here, with
// the reason as its last error.
const recordSQL = `UPDATE deliveries SET
    status = 'exhausted',
    last_error = CASE WHEN status = 'exhausted' THEN last_error ELSE $2 END,
    completed_at = coalesce(completed_at, now()),
    dead_lettered_at = coalesce(dead_lettered_at, now()),
    updated_at = now()
WHERE id = $1 AND status IN ('pending', 'retrying', 'exhausted')`

const retryDelay = time.Second

// Handle records one dead letter.
func (r *Recorder) Handle(ctx context.Context, d amqp.Delivery) queue.Disposition {
	t, err := outbox.DecodeTask(d.Body)
	if err != nil {
		r.log.Error("undecodable dead letter dropped", "message_id", d.MessageId, "error", err, "body_sample", sample(d.Body))
		metrics.DeadLettered.WithLabelValues("malformed").Inc()
		return queue.Ack
	}
	reason, kind := deadReason(d)
	tag, err := r.pool.Exec(ctx, recordSQL, t.DeliveryID, reason)
	if err != nil {
		r.log.Warn("dead letter not recorded yet; retrying", "delivery_id", t.DeliveryID.String(), "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(retryDelay):
		}
		return queue.Requeue
	}
	if tag.RowsAffected() == 0 {
		kind = "gone"
	}
	metrics.DeadLettered.WithLabelValues(kind).Inc()
	r.log.Info("dead letter recorded", "delivery_id", t.DeliveryID.String(), "tenant_id", t.TenantID.String(),
		"webhook_id", t.WebhookID.String(), "event_id", t.EventID.String(), "reason", reason)
	return queue.Ack
}

// deadReason tells an exhausted delivery (sent by a worker) from a poison
// message (dead-lettered by its work queue's delivery limit).
func deadReason(d amqp.Delivery) (string, string) {
	if r, ok := d.Headers[delivery.HeaderDeadReason].(string); ok {
		return r, "exhausted"
	}
	count := int64(0)
	if deaths, ok := d.Headers["x-death"].([]any); ok && len(deaths) > 0 {
		if death, ok := deaths[0].(amqp.Table); ok {
			if c, ok := death["count"].(int64); ok {
				count = c
			}
		}
	}
	if c, ok := d.Headers["x-delivery-count"].(int64); ok && c > count {
		count = c
	}
	return fmt.Sprintf("poison message: handed to workers %d times without being settled", count), "poison"
}

func sample(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
