package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// SecretPrefix starts every webhook signing secret.
const SecretPrefix = "whsec_"

const (
	minSecretBytes = 24
	maxSecretBytes = 64
	newSecretBytes = 32
)

// NewSecret returns a fresh random signing secret: whsec_ followed by the
// standard base64 of 32 random bytes.
func NewSecret() string {
	b := make([]byte, newSecretBytes)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString(b)
}

// DecodeSecret returns the HMAC key bytes of a whsec_ secret.
func DecodeSecret(secret string) ([]byte, error) {
	enc, ok := strings.CutPrefix(secret, SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("must start with %q", SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return nil, fmt.Errorf("must be %s followed by standard base64", SecretPrefix)
	}
	if len(key) < minSecretBytes || len(key) > maxSecretBytes {
		return nil, fmt.Errorf("must encode between %d and %d bytes, got %d", minSecretBytes, maxSecretBytes, len(key))
	}
	return key, nil
}
