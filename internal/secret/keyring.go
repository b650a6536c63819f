// Package secret protects webhook signing secrets at rest and keeps
// secret-looking values out of what hookline stores.
//
// A Keyring holds AES-256 keys, each with a short id; the first is current.
// Seal encrypts with AES-GCM under the current key and writes the key id
// into the result, so that Open finds the right key after a rotation:
//
//	enc:v1:<key id>:<base64(nonce || ciphertext || tag)>
//
// The additional data binds a ciphertext to its webhook: a sealed secret
// copied onto another row does not open there.
package secret

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// sealedPrefix starts every sealed value.
const sealedPrefix = "enc:v1:"

// KeySize is the length of every key: AES-256.
const KeySize = 32

// ErrUnknownKey means a value was sealed under a key the keyring lacks.
var ErrUnknownKey = errors.New("sealed with a key that is not configured")

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// Keyring holds the encryption keys; the zero of *Keyring (nil) seals
// nothing and opens only plaintext.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// ParseKeys builds a keyring from "id:base64key" entries, the first being
// the current key. Keys are 32 bytes, in standard base64.
func ParseKeys(entries []string) (*Keyring, error) {
	if len(entries) == 0 {
		return nil, errors.New("no keys")
	}
	k := &Keyring{aeads: make(map[string]cipher.AEAD, len(entries))}
	for i, e := range entries {
		id, enc, ok := strings.Cut(strings.TrimSpace(e), ":")
		if !ok || !keyIDPattern.MatchString(id) {
			return nil, fmt.Errorf("key %d: must be id:base64, the id 1-32 letters, digits, _ or -", i+1)
		}
		raw, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(raw) != KeySize {
			return nil, fmt.Errorf("key %q: must be the standard base64 of %d bytes", id, KeySize)
		}
		if _, dup := k.aeads[id]; dup {
			return nil, fmt.Errorf("key %q: given twice", id)
		}
		block, err := aes.NewCipher(raw)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", id, err)
		}
		k.aeads[id] = aead
		if i == 0 {
			k.current = id
		}
	}
	return k, nil
}

// CurrentID is the id of the key Seal uses ("" for a nil keyring).
func (k *Keyring) CurrentID() string {
	if k == nil {
		return ""
	}
	return k.current
}

// Seal encrypts plaintext under the current key, bound to aad. A nil
// keyring returns plaintext unchanged (development without a key).
func (k *Keyring) Seal(plaintext, aad string) (string, error) {
	if k == nil {
		return plaintext, nil
	}
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("nonce: %w", err)
	}
	out := aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
	return sealedPrefix + k.current + ":" + base64.StdEncoding.EncodeToString(out), nil
}

// Open returns the plaintext of a value written by Seal with the same aad.
// A value that is not sealed (written before any key was configured) is
// returned as it is; KeyID tells the two apart.
func (k *Keyring) Open(stored, aad string) (string, error) {
	rest, ok := strings.CutPrefix(stored, sealedPrefix)
	if !ok {
		return stored, nil
	}
	id, enc, ok := strings.Cut(rest, ":")
	if !ok {
		return "", errors.New("malformed sealed value")
	}
	var aead cipher.AEAD
	if k != nil {
		aead = k.aeads[id]
	}
	if aead == nil {
		return "", fmt.Errorf("key %q: %w", id, ErrUnknownKey)
	}
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", errors.New("malformed sealed value")
	}
	n := aead.NonceSize()
	plain, err := aead.Open(nil, raw[:n], raw[n:], []byte(aad))
	if err != nil {
		return "", fmt.Errorf("open sealed value under key %q: %w", id, err)
	}
	return string(plain), nil
}

// KeyID returns the id of the key stored was sealed under, and false for
// a value that is not sealed.
func KeyID(stored string) (string, bool) {
	rest, ok := strings.CutPrefix(stored, sealedPrefix)
	if !ok {
		return "", false
	}
	id, _, _ := strings.Cut(rest, ":")
	return id, true
}

// FromConfig builds the keyring of the configured entries, or returns nil
// (no encryption) when there are none.
func FromConfig(entries []string) (*Keyring, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	return ParseKeys(entries)
}
