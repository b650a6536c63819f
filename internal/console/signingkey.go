package console

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookline/hookline/internal/db"
	"github.com/hookline/hookline/internal/secret"
)

// Session cookies and CSRF tokens are signed with a key of the console's
// own (migration 000013): 32 random bytes, sealed with the secret keyring,
// made by the first api process that needs one and shared by all of them
// through Postgres. Earlier versions derived the key from the admin token,
// so that every cookie, and the token of the sign-in form handed out
// without authentication, let anyone check guesses of that token offline.
//
// Every cookie and token names the key that signed it. The newest key
// signs; every stored key verifies, so that a rotation ("api
// rotate-console-key") signs nobody out. A process reloads the keys a
// minute after it last did, and at once when it meets a key newer than
// any it knows, so that a new key signs everywhere within a minute and a
// retired one stops verifying within a minute.

const (
	signingKeySize = 32
	// signingKeyRefresh is how long a process trusts the keys it loaded.
	signingKeyRefresh = time.Minute

	selectSigningKeysSQL = `SELECT id, sealed_key FROM console_signing_keys ORDER BY id`
	// firstSigningKeySQL makes key 1 when there is none; of processes
	// starting together, one wins and the others load its key.
	firstSigningKeySQL = `INSERT INTO console_signing_keys (id, sealed_key)
SELECT 1, $1 WHERE NOT EXISTS (SELECT 1 FROM console_signing_keys) ON CONFLICT (id) DO NOTHING`
	nextSigningKeyIDSQL  = `SELECT coalesce(max(id), 0) + 1 FROM console_signing_keys`
	insertSigningKeySQL  = `INSERT INTO console_signing_keys (id, sealed_key) VALUES ($1, $2)`
	retireSigningKeysSQL = `DELETE FROM console_signing_keys WHERE id < $1 - 1`
	resealSigningKeySQL  = `UPDATE console_signing_keys SET sealed_key = $2 WHERE id = $1`
)

// signingKeyAAD binds a sealed signing key to its id.
func signingKeyAAD(id uint32) string {
	return "hookline console signing key " + strconv.FormatUint(uint64(id), 10)
}

// signingKeys is this process's copy of the stored keys.
type signingKeys struct {
	db   *pgxpool.Pool
	seal *secret.Keyring
	log  *slog.Logger

	mu       sync.Mutex
	byID     map[uint32][]byte
	newest   uint32
	loadedAt time.Time
}

// current returns the key that signs now, and its id.
func (k *signingKeys) current(ctx context.Context, now time.Time) (uint32, []byte, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.byID == nil || now.Sub(k.loadedAt) >= signingKeyRefresh {
		if err := k.load(ctx, now); err != nil {
			return 0, nil, err
		}
	}
	return k.newest, k.byID[k.newest], nil
}

// get returns the key id, false when no stored key has that id.
func (k *signingKeys) get(ctx context.Context, id uint32, now time.Time) ([]byte, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.byID[id]
	// A key newer than the newest known was made since the last load; an
	// older unknown one was retired, or never existed.
	if k.byID == nil || now.Sub(k.loadedAt) >= signingKeyRefresh || (!ok && id > k.newest) {
		if err := k.load(ctx, now); err != nil {
			return nil, false, err
		}
		key, ok = k.byID[id]
	}
	return key, ok, nil
}

// load reads the stored keys, making the first one when there is none.
// The caller holds k.mu.
func (k *signingKeys) load(ctx context.Context, now time.Time) error {
	byID, newest, err := k.read(ctx)
	if err != nil {
		return err
	}
	if len(byID) == 0 {
		if err := k.create(ctx); err != nil {
			return err
		}
		if byID, newest, err = k.read(ctx); err != nil {
			return err
		}
	}
	if len(byID) == 0 {
		return errors.New("console signing key: none of the stored keys opens with security.secret_keys " +
			"(was the secret key that sealed them removed before api rotate-secret-key ran?); api rotate-console-key makes a new one")
	}
	k.byID, k.newest, k.loadedAt = byID, newest, now
	return nil
}

// read opens every stored key. A key sealed under a secret key that is not
// configured is left out (and logged): cookies it signed are ended.
func (k *signingKeys) read(ctx context.Context) (map[uint32][]byte, uint32, error) {
	rows, err := k.db.Query(ctx, selectSigningKeysSQL)
	if err != nil {
		return nil, 0, fmt.Errorf("load console signing keys: %w", err)
	}
	stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedSigningKey])
	if err != nil {
		return nil, 0, fmt.Errorf("load console signing keys: %w", err)
	}
	byID := make(map[uint32][]byte, len(stored))
	var newest uint32
	for _, s := range stored {
		key, err := openSigningKey(k.seal, s)
		if err != nil {
			k.log.Error("console signing key not usable", "key_id", s.ID, "error", err)
			continue
		}
		id := uint32(s.ID) //nolint:gosec // ids are positive (CHECK id > 0)
		byID[id] = key
		newest = max(newest, id)
	}
	return byID, newest, nil
}

// create stores a first key, and tells the operator that sessions signed
// the old way have ended.
func (k *signingKeys) create(ctx context.Context) error {
	sealed, err := newSealedSigningKey(k.seal, 1)
	if err != nil {
		return err
	}
	tag, err := k.db.Exec(ctx, firstSigningKeySQL, sealed)
	if err != nil {
		return fmt.Errorf("create console signing key: %w", err)
	}
	if tag.RowsAffected() == 1 {
		k.log.Warn("console signing key created: console and portal sessions signed before, with the key earlier versions derived from the admin token, have ended; operators and portal customers sign in again",
			"key_id", 1)
	}
	return nil
}

// storedSigningKey is a row of console_signing_keys.
type storedSigningKey struct {
	ID     int32
	Sealed string
}

func openSigningKey(seal *secret.Keyring, s storedSigningKey) ([]byte, error) {
	plain, err := seal.Open(s.Sealed, signingKeyAAD(uint32(s.ID))) //nolint:gosec // ids are positive
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(plain)
	if err != nil || len(key) != signingKeySize {
		return nil, fmt.Errorf("stored key is not the base64 of %d bytes", signingKeySize)
	}
	return key, nil
}

func newSealedSigningKey(seal *secret.Keyring, id uint32) (string, error) {
	raw := make([]byte, signingKeySize)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("console signing key: %w", err)
	}
	return sealSigningKey(seal, id, raw)
}

// sealSigningKey is the stored form of key id: its base64 (text, as the
// column is), sealed.
func sealSigningKey(seal *secret.Keyring, id uint32, key []byte) (string, error) {
	sealed, err := seal.Seal(base64.StdEncoding.EncodeToString(key), signingKeyAAD(id))
	if err != nil {
		return "", fmt.Errorf("seal console signing key %d: %w", id, err)
	}
	return sealed, nil
}

// RotateSigningKey adds a new console signing key, which signs from then
// on (in every api process within a minute), and deletes the keys older
// than the one it replaces: sessions signed with the replaced key keep
// working, those signed with older ones end. It returns the new key's id.
func RotateSigningKey(ctx context.Context, pool *pgxpool.Pool, seal *secret.Keyring) (uint32, error) {
	var id uint32
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE console_signing_keys IN EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock console signing keys: %w", err)
		}
		var next int32
		if err := tx.QueryRow(ctx, nextSigningKeyIDSQL).Scan(&next); err != nil {
			return fmt.Errorf("next console signing key: %w", err)
		}
		id = uint32(next) //nolint:gosec // positive
		sealed, err := newSealedSigningKey(seal, id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, insertSigningKeySQL, next, sealed); err != nil {
			return fmt.Errorf("insert console signing key: %w", err)
		}
		if _, err := tx.Exec(ctx, retireSigningKeysSQL, next); err != nil {
			return fmt.Errorf("retire console signing keys: %w", err)
		}
		return nil
	})
	return id, err
}

// ResealSigningKeys seals every console signing key again under the
// current secret key (part of "api rotate-secret-key"), and returns how
// many it resealed.
func ResealSigningKeys(ctx context.Context, pool *pgxpool.Pool, seal *secret.Keyring) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, selectSigningKeysSQL+` FOR UPDATE`)
		if err != nil {
			return fmt.Errorf("load console signing keys: %w", err)
		}
		stored, err := pgx.CollectRows(rows, pgx.RowToStructByPos[storedSigningKey])
		if err != nil {
			return fmt.Errorf("load console signing keys: %w", err)
		}
		for _, s := range stored {
			key, err := openSigningKey(seal, s)
			if err != nil {
				return fmt.Errorf("console signing key %d: %w", s.ID, err)
			}
			sealed, err := sealSigningKey(seal, uint32(s.ID), key) //nolint:gosec // positive
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, resealSigningKeySQL, s.ID, sealed); err != nil {
				return fmt.Errorf("reseal console signing key %d: %w", s.ID, err)
			}
			n++
		}
		return nil
	})
	return n, err
}

// RotateSigningKeyCommand is "api rotate-console-key": it opens the
// database at databaseURL and rotates the console signing key.
func RotateSigningKeyCommand(ctx context.Context, databaseURL string, keyEntries []string, log *slog.Logger) error {
	return withSigningKeyStore(ctx, databaseURL, keyEntries, func(pool *pgxpool.Pool, seal *secret.Keyring) error {
		id, err := RotateSigningKey(ctx, pool, seal)
		if err != nil {
			return err
		}
		log.Info("console signing key rotated", "key_id", id)
		return nil
	})
}

// ResealSigningKeysCommand is the console's part of "api
// rotate-secret-key": it seals the console signing keys again under the
// current secret key, so that the previous one can be removed.
func ResealSigningKeysCommand(ctx context.Context, databaseURL string, keyEntries []string, log *slog.Logger) error {
	return withSigningKeyStore(ctx, databaseURL, keyEntries, func(pool *pgxpool.Pool, seal *secret.Keyring) error {
		n, err := ResealSigningKeys(ctx, pool, seal)
		if err != nil {
			return err
		}
		log.Info("console signing keys resealed", "key_id", seal.CurrentID(), "keys", n)
		return nil
	})
}

// withSigningKeyStore runs f on the database at databaseURL with the
// secret keys of keyEntries, for the commands above.
func withSigningKeyStore(ctx context.Context, databaseURL string, keyEntries []string,
	f func(*pgxpool.Pool, *secret.Keyring) error) error {
	seal, err := secret.FromConfig(keyEntries)
	if err != nil {
		return fmt.Errorf("config security.secret_keys: %w", err)
	}
	pool, err := db.Open(ctx, databaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	return f(pool, seal)
}
