// Package audit records security-relevant actions of tenants and operators
// (tenant and key creation, key revocation, every change to a webhook,
// breaker overrides, retries, recoveries and replays, and the automatic
// disabling of failing endpoints) in the audit_log table, and lists a
// tenant's own rows.
//
// Who acts travels in the request context (WithActor), so that stores can
// write the row inside the transaction of the action they perform without
// every store method taking the caller's identity as an argument.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Actions written to the log.
const (
	TenantCreated  = "tenant.created"
	APIKeyCreated  = "api_key.created"
	APIKeyRevoked  = "api_key.revoked"
	SecretRotated  = "webhook.secret_rotated"
	WebhookCreated = "webhook.created"
	// WebhookUpdated names the fields changed (details.changed), never a
	// header value or the secret.
	WebhookUpdated     = "webhook.updated"
	WebhookPaused      = "webhook.paused"
	WebhookResumed     = "webhook.resumed"
	WebhookTestSent    = "webhook.test_sent"
	WebhookVerified    = "webhook.verified"
	WebhookDeleted     = "webhook.deleted"
	CircuitOverridden  = "webhook.circuit_breaker_overridden"
	DeliveryRetried    = "delivery.retried"
	BatchRetryCreated  = "dlq.batch_retry_created"
	BatchRetryCanceled = "dlq.batch_retry_cancelled"
	EventReplayed      = "event.replayed"
	// WebhookAutoDisabled is written by hookline itself (no actor) when it
	// disables an endpoint that kept failing.
	WebhookAutoDisabled = "webhook.auto_disabled"
	RecoveryCreated     = "webhook.recovery_created"
)

// Kinds of actor, in the actor_type column.
const (
	ActorAPIKey     = "api_key"
	ActorServiceKey = "service_key"
	ActorPortal     = "portal"
	ActorAdmin      = "admin"
	ActorSystem     = "system"
)

// Actor is who performs an action, from a remote address: a tenant API key
// (KeyID), a service key acting for the tenant (ServiceKeyID), a portal
// session (opened by ServiceKeyID, or by the admin when it is nil), the
// admin token, or hookline itself (the zero Actor).
type Actor struct {
	Type         string
	KeyID        *uuid.UUID
	ServiceKeyID *uuid.UUID
	RemoteAddr   string
}

// kind is a's actor_type: its Type, else system.
func (a Actor) kind() string {
	if a.Type == "" {
		return ActorSystem
	}
	return a.Type
}

type actorKey struct{}

// WithActor returns ctx carrying a.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor carried by ctx (the zero Actor if none).
func ActorFrom(ctx context.Context) Actor {
	a, _ := ctx.Value(actorKey{}).(Actor)
	return a
}

// Entry is one row of the audit log.
type Entry struct {
	ID       uuid.UUID `json:"id"`
	TenantID uuid.UUID `json:"-"`
	// ActorType is api_key, service_key, portal, admin or system.
	ActorType         string          `json:"actor_type"`
	ActorKeyID        *uuid.UUID      `json:"actor_key_id"`
	ActorServiceKeyID *uuid.UUID      `json:"actor_service_key_id"`
	Action            string          `json:"action"`
	TargetType        string          `json:"target_type"`
	TargetID          string          `json:"target_id"`
	Details           json.RawMessage `json:"details"`
	RemoteAddr        string          `json:"remote_addr"`
	At                time.Time       `json:"at"`
}

// Execer runs a statement: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

const (
	insertSQL = `INSERT INTO audit_log (id, tenant_id, actor_type, actor_key_id, actor_service_key_id, action, target_type,
    target_id, details, remote_addr, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now())`
	// Rows written without actor_type (by a process of the previous
	// version during a rolling deploy) read as migration 000009 reads
	// the older ones.
	listSQL = `SELECT id, CASE WHEN actor_type <> '' THEN actor_type WHEN action = 'webhook.auto_disabled' THEN 'system'
        WHEN actor_key_id IS NOT NULL THEN 'api_key' ELSE 'admin' END,
    actor_key_id, actor_service_key_id, action, target_type, target_id, details, remote_addr, at
FROM audit_log
WHERE tenant_id = $1 AND ($2::uuid IS NULL OR id < $2)
ORDER BY id DESC
LIMIT $3`
)

// Record writes one row for tenantID with the actor of ctx. Call it with the
// transaction of the action, so that the row exists exactly when the action
// happened. details may be nil.
func Record(ctx context.Context, db Execer, tenantID uuid.UUID, action, targetType, targetID string, details map[string]any) error {
	if details == nil {
		details = map[string]any{}
	}
	raw, err := json.Marshal(details)
	if err != nil {
		return fmt.Errorf("encode audit details: %w", err)
	}
	a := ActorFrom(ctx)
	_, err = db.Exec(ctx, insertSQL, uuid.Must(uuid.NewV7()), tenantID, a.kind(), a.KeyID, a.ServiceKeyID, action, targetType, targetID, raw, a.RemoteAddr)
	if err != nil {
		return fmt.Errorf("record audit %s: %w", action, err)
	}
	return nil
}

// Store reads the audit log.
type Store struct {
	pool *pgxpool.Pool
}

// NewStore returns a Store on pool.
func NewStore(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Record writes one row outside any transaction, for actions whose own
// store call commits on its own.
func (s *Store) Record(ctx context.Context, tenantID uuid.UUID, action, targetType, targetID string, details map[string]any) error {
	return Record(ctx, s.pool, tenantID, action, targetType, targetID, details)
}

// List returns up to limit rows of tenantID, newest first, older than
// before when it is given.
func (s *Store) List(ctx context.Context, tenantID uuid.UUID, before *uuid.UUID, limit int) ([]Entry, error) {
	rows, err := s.pool.Query(ctx, listSQL, tenantID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list audit log: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) {
		e := Entry{TenantID: tenantID}
		err := row.Scan(&e.ID, &e.ActorType, &e.ActorKeyID, &e.ActorServiceKeyID, &e.Action, &e.TargetType, &e.TargetID, &e.Details, &e.RemoteAddr, &e.At)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("list audit log: %w", err)
	}
	return out, nil
}
