package webhook

import (
	"context"
	"encoding/json"
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

// headerAAD binds a sealed header value to its webhook and header name, so
// that it opens neither on another row nor under another name.
func headerAAD(id uuid.UUID, name string) string {
	return "hookline webhook header " + id.String() + " " + name
}

// SealHeaders returns the stored form of a webhook's custom headers: each
// value sealed like the signing secret (unchanged when keys is nil). The
// headers column stays a JSON object of strings.
func SealHeaders(keys *secret.Keyring, webhookID uuid.UUID, h map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(h))
	for name, v := range h {
		sealed, err := keys.Seal(v, headerAAD(webhookID, name))
		if err != nil {
			return nil, fmt.Errorf("seal header %s of webhook %s: %w", name, webhookID, err)
		}
		out[name] = sealed
	}
	return out, nil
}

// OpenHeaders decodes the headers column of webhook id and opens every
// value: what a delivery sends. Values stored in clear (before any key was
// configured) are returned as they are, until "api rotate-secret-key"
// seals them.
func OpenHeaders(keys *secret.Keyring, webhookID uuid.UUID, column []byte) (map[string]string, error) {
	var stored map[string]string
	if err := json.Unmarshal(column, &stored); err != nil {
		return nil, fmt.Errorf("decode headers of webhook %s: %w", webhookID, err)
	}
	return openHeaders(keys, webhookID, stored)
}

func openHeaders(keys *secret.Keyring, webhookID uuid.UUID, stored map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(stored))
	for name, v := range stored {
		plain, err := keys.Open(v, headerAAD(webhookID, name))
		if err != nil {
			return nil, fmt.Errorf("open header %s of webhook %s: %w", name, webhookID, err)
		}
		out[name] = plain
	}
	return out, nil
}

const (
	reencryptPageSize = 500
	// Deleted webhooks are included: their secrets are in the table too.
	reencryptPageSQL = `SELECT id, secret, previous_secret, headers FROM webhooks WHERE id > $1 ORDER BY id LIMIT $2 FOR UPDATE`
	reencryptRowSQL  = `UPDATE webhooks SET secret = $2, previous_secret = $3, headers = $4 WHERE id = $1`
)

// ReencryptSecrets seals every stored secret (current and previous, of
// live and deleted webhooks) and every custom header value under the
// current key of keys, page by page, each page in its own transaction.
// Values already under the current key are left alone, so the command can
// be run again after an interruption.
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
	headers    map[string]string
	needsWrite bool
}

func reencryptPage(ctx context.Context, tx pgx.Tx, keys *secret.Keyring, after uuid.UUID) (written, seen int, last uuid.UUID, err error) {
	rows, err := tx.Query(ctx, reencryptPageSQL, after, reencryptPageSize)
	if err != nil {
		return 0, 0, after, fmt.Errorf("read secrets: %w", err)
	}
	page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (storedSecrets, error) {
		var s storedSecrets
		return s, r.Scan(&s.id, &s.cur, &s.prev, &s.headers)
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
		if _, err := tx.Exec(ctx, reencryptRowSQL, row.id, row.cur, row.prev, row.headers); err != nil {
			return 0, 0, after, fmt.Errorf("rewrite secret of webhook %s: %w", row.id, err)
		}
		written++
	}
	return written, len(page), last, nil
}

// reseal seals row's secrets and header values under the current key where
// they are not.
func reseal(keys *secret.Keyring, row *storedSecrets) error {
	if err := resealHeaders(keys, row); err != nil {
		return err
	}
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

func resealHeaders(keys *secret.Keyring, row *storedSecrets) error {
	for name, v := range row.headers {
		if id, sealed := secret.KeyID(v); sealed && id == keys.CurrentID() {
			continue
		}
		plain, err := keys.Open(v, headerAAD(row.id, name))
		if err != nil {
			return fmt.Errorf("open header %s of webhook %s: %w", name, row.id, err)
		}
		if row.headers[name], err = keys.Seal(plain, headerAAD(row.id, name)); err != nil {
			return fmt.Errorf("seal header %s of webhook %s: %w", name, row.id, err)
		}
		row.needsWrite = true
	}
	return nil
}

// RotateSecretKeyCommand is "api rotate-secret-key": it seals every webhook
// secret and custom header value under the current key (the first of
// security.secret_keys), so that older keys can then be removed from the
// configuration. Run it once every process has been given the new key list.
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
