package secret

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func newKey(t *testing.T, id string) string {
	t.Helper()
	b := make([]byte, KeySize)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return id + ":" + base64.StdEncoding.EncodeToString(b)
}

func TestSealOpenRotate(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	old, err := ParseKeys([]string{k1})
	require.NoError(t, err)
	sealed, err := old.Seal("whsec_abc", "webhook-1")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sealed, "enc:v1:k1:"), sealed)
	require.NotContains(t, sealed, "whsec_abc")
	again, err := old.Seal("whsec_abc", "webhook-1")
	require.NoError(t, err)
	require.NotEqual(t, sealed, again, "a fresh nonce each time")

	plain, err := old.Open(sealed, "webhook-1")
	require.NoError(t, err)
	require.Equal(t, "whsec_abc", plain)
	_, err = old.Open(sealed, "webhook-2")
	require.Error(t, err, "a ciphertext moved to another webhook does not open")

	rotated, err := ParseKeys([]string{k2, k1})
	require.NoError(t, err)
	plain, err = rotated.Open(sealed, "webhook-1")
	require.NoError(t, err, "old ciphertexts open with the old key")
	require.Equal(t, "whsec_abc", plain)
	resealed, err := rotated.Seal(plain, "webhook-1")
	require.NoError(t, err)
	id, ok := KeyID(resealed)
	require.True(t, ok)
	require.Equal(t, "k2", id)

	_, err = old.Open(resealed, "webhook-1")
	require.ErrorIs(t, err, ErrUnknownKey)
	var none *Keyring
	_, err = none.Open(sealed, "webhook-1")
	require.ErrorIs(t, err, ErrUnknownKey)
	plain, err = none.Open("whsec_plain", "x")
	require.NoError(t, err, "values written before any key existed stay readable")
	require.Equal(t, "whsec_plain", plain)

	tampered := sealed[:len(sealed)-4] + "AAA="
	_, err = old.Open(tampered, "webhook-1")
	require.Error(t, err)
}

func TestParseKeysRefusals(t *testing.T) {
	t.Parallel()
	good := newKey(t, "a")
	for name, entries := range map[string][]string{
		"none":      {},
		"no colon":  {"abc"},
		"bad id":    {"a b:" + strings.SplitN(good, ":", 2)[1]},
		"short key": {"a:" + base64.StdEncoding.EncodeToString([]byte("short"))},
		"not b64":   {"a:!!!"},
		"duplicate": {good, good},
	} {
		_, err := ParseKeys(entries)
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), strings.SplitN(good, ":", 2)[1], "errors never echo a key")
	}
}

func TestLooksSecret(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"Set-Cookie": true, "Authorization": true, "WWW-Authenticate": true, "Proxy-Authenticate": true,
		"X-Api-Key": true, "X-Auth-Token": true, "X-Webhook-Signature": true, "Webhook-Signature": true,
		"X-Session-Id": true, "X-Client-Secret": true, "Keep-Alive": false,
		"Content-Type": false, "Retry-After": false, "Date": false, "X-Request-Id": false, "Server": false,
	} {
		require.Equal(t, want, LooksSecret(name), name)
	}
	in := map[string]string{"Set-Cookie": "s=1", "Content-Type": "text/plain", "x-access-token": "t"}
	require.Equal(t, map[string]string{"Content-Type": "text/plain"}, StorableHeaders(in))
	require.Len(t, in, 3)
}
