package webhook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/secret"
)

// secretAAD binds a sealed secret to its webhook, so that a ciphertext
// copied onto another webhook's row does not open there.
func secretAAD(id uuid.UUID) string { return "hookline webhook secret " + id.String() }

// SealSecret encrypts a webhook's signing secret for storage (unchanged
// when keys is nil).
func SealSecret(keys *secret.Keyring, webhookID uuid.UUID, plain string) (string, error) {
	sealed, err := keys.Seal(plain, secretAAD(webhookID))
	if err != nil {
		return "", fmt.Errorf("seal secret of webhook %s: %w", webhookID, err)
	}
	return sealed, nil
}

// OpenSecret returns the plaintext of a stored secret of webhook id. A
// secret stored in clear (before any key was configured) is returned as it
// is, until "api rotate-secret-key" seals it.
func OpenSecret(keys *secret.Keyring, webhookID uuid.UUID, stored string) (string, error) {
	plain, err := keys.Open(stored, secretAAD(webhookID))
	if err != nil {
		return "", fmt.Errorf("open secret of webhook %s: %w", webhookID, err)
	}
	return plain, nil
}

const (
	reencryptPageSize = 500
	// Deleted webhooks are included: their secrets are in the table too.
	reencryptPageSQL = `SELECT id, secret, previous_secret FROM webhooks WHERE id > $1 ORDER BY id LIMIT $2 FOR UPDATE`
	reencryptRowSQL  = `UPDATE webhooks SET secret = $2, previous_secret = $3 WHERE id = $1`
)

// ReencryptSecrets seals every stored secret (current and previous, of
// live and deleted webhooks) under the current key of keys, page by page,
// each page in its own transaction. Secrets already under the current key
// are left alone, so the command can be run again after an interruption.
// It returns how many webhooks were rewritten.
func ReencryptSecrets(ctx context.Context, pool *pgxpool.Pool, keys *secret.Keyring) (int, error) {
	if keys == nil {
		return 0, errors.New("no secret key configured (security.secret_keys or SECRET_KEYS)")
	}
	var after uuid.UUID
	total := 0
	for {
		var n, seen int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			n, seen, after, err = reencryptPage(ctx, tx, keys, after)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if seen < reencryptPageSize {
			return total, nil
		}
	}
}

type storedSecrets struct {
	id         uuid.UUID
	cur        string
	prev       *string
	needsWrite bool
}

func reencryptPage(ctx context.Context, tx pgx.Tx, keys *secret.Keyring, after uuid.UUID) (written, seen int, last uuid.UUID, err error) {
	rows, err := tx.Query(ctx, reencryptPageSQL, after, reencryptPageSize)
	if err != nil {
		return 0, 0, after, fmt.Errorf("read secrets: %w", err)
	}
	page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedSecrets, error) {
		var s storedSecrets
		return s, r.Scan(&s.id, &s.cur, &s.prev)
	})
	if err != nil {
		return 0, 0, after, fmt.Errorf("read secrets: %w", err)
	}
	last = after
	for _, row := range page {
		last = row.id
		if err := reseal(keys, &row); err != nil {
			return 0, 0, after, err
		}
		if !row.needsWrite {
			continue
		}
		if _, err := tx.Exec(ctx, reencryptRowSQL, row.id, row.cur, row.prev); err != nil {
			return 0, 0, after, fmt.Errorf("rewrite secret of webhook %s: %w", row.id, err)
		}
		written++
	}
	return written, len(page), last, nil
}

// reseal seals row's secrets under the current key where they are not.
func reseal(keys *secret.Keyring, row *storedSecrets) error {
	for _, v := range []*string{&row.cur, row.prev} {
		if v == nil {
			continue
		}
		if id, sealed := secret.KeyID(*v); sealed && id == keys.CurrentID() {
			continue
		}
		plain, err := OpenSecret(keys, row.id, *v)
		if err != nil {
			return err
		}
		if *v, err = SealSecret(keys, row.id, plain); err != nil {
			return err
		}
		row.needsWrite = true
	}
	return nil
}

// RotateSecretKeyCommand is "api rotate-secret-key": it seals every webhook
// secret under the current key (the first of security.secret_keys), so
// that older keys can then be removed from the configuration. Run it once
// every process has been given the new key list.
func RotateSecretKeyCommand(ctx context.Context, databaseURL string, keyEntries []string, log *slog.Logger) error {
	pool, err := db.Open(ctx, databaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return rotateSecretKey(ctx, pool, keyEntries, log)
}

func rotateSecretKey(ctx context.Context, pool *pgxpool.Pool, keyEntries []string, log *slog.Logger) error {
	keys, err := secret.FromConfig(keyEntries)
	if err != nil {
		return fmt.Errorf("config security.secret_keys: %w", err)
	}
	n, err := ReencryptSecrets(ctx, pool, keys)
	if err != nil {
		return fmt.Errorf("re-encrypt webhook secrets (%d done): %w", n, err)
	}
	log.Info("webhook secrets re-encrypted", "key_id", keys.CurrentID(), "webhooks", n)
	return nil
}
