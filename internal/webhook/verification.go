package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

const (
	// startVerificationSQL makes the webhook's verification pending,
	// whatever it was (none, pending, verified or failed): a check is
	// about to run and, until it answers, nothing is delivered.
	startVerificationSQL = `UPDATE webhooks SET verification = $3
WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL
RETURNING ` + webhookColumns

	// finishVerificationSQL records the outcome of a check of url. It
	// moves only a pending verification, and only while the webhook
	// still has that url: a check of an address the webhook no longer
	// has, or one finishing after another, changes nothing.
	finishVerificationSQL = `UPDATE webhooks SET verification = $4
WHERE id = $1 AND tenant_id = $2 AND deleted_at IS NULL AND url = $3
  AND verification->>'state' = '` + VerificationPending + `'
RETURNING ` + webhookColumns
)

// StartVerification makes the verification of the tenant's webhook id
// pending and returns the webhook; the caller then checks the endpoint
// and calls FinishVerification.
func (s *Store) StartVerification(ctx context.Context, tenantID, id uuid.UUID) (Webhook, error) {
	pending, err := json.Marshal(Verification{State: VerificationPending})
	if err != nil {
		return Webhook{}, fmt.Errorf("encode verification: %w", err)
	}
	w, err := s.scan(s.pool.QueryRow(ctx, startVerificationSQL, id, tenantID, pending))
	if errors.Is(err, pgx.ErrNoRows) {
		return Webhook{}, ErrNotFound
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("start verification of webhook %s: %w", id, err)
	}
	return w, nil
}

// FinishVerification records the outcome of checking url for the tenant's
// webhook id: verified at now when errText is empty, failed with errText
// otherwise. It returns the webhook as it then is, which is unchanged when
// the check no longer applies (the url changed, the verification was
// dropped or another check finished first).
func (s *Store) FinishVerification(ctx context.Context, tenantID, id uuid.UUID, url, errText string, now time.Time) (Webhook, error) {
	v := Verification{State: VerificationFailed, LastError: &errText}
	if errText == "" {
		at := now.UTC().Truncate(time.Microsecond)
		v = Verification{State: VerificationVerified, VerifiedAt: &at}
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return Webhook{}, fmt.Errorf("encode verification: %w", err)
	}
	w, err := s.scan(s.pool.QueryRow(ctx, finishVerificationSQL, id, tenantID, url, raw))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.Get(ctx, tenantID, id)
	}
	if err != nil {
		return Webhook{}, fmt.Errorf("finish verification of webhook %s: %w", id, err)
	}
	return w, nil
}

// decodeVerification reads the verification column: nil for NULL.
func decodeVerification(raw []byte) (*Verification, error) {
	if raw == nil {
		return nil, nil
	}
	var v Verification
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if v.VerifiedAt != nil {
		at := v.VerifiedAt.UTC()
		v.VerifiedAt = &at
	}
	return &v, nil
}
