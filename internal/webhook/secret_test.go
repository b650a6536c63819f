package webhook

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// standardWebhooksSecret is the test secret of the Standard Webhooks
// specification; it encodes 24 bytes.
const standardWebhooksSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestNewSecret(t *testing.T) {
	t.Parallel()

	seen := map[string]bool{}
	for range 50 {
		s := NewSecret()
		enc, ok := strings.CutPrefix(s, "whsec_")
		require.True(t, ok, s)
		require.Len(t, enc, 44) // 32 bytes in padded standard base64
		raw, err := base64.StdEncoding.DecodeString(enc)
		require.NoError(t, err)
		require.Len(t, raw, 32)

		key, err := DecodeSecret(s)
		require.NoError(t, err)
		require.Equal(t, raw, key)

		require.False(t, seen[s], "NewSecret repeated itself")
		seen[s] = true
	}
}

func TestDecodeSecret(t *testing.T) {
	t.Parallel()

	secret := func(n int) string {
		return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xa5}, n))
	}
	stdKey, err := base64.StdEncoding.DecodeString("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)

	tests := []struct {
		name    string
		secret  string
		want    []byte
		wantErr string
	}{
		{name: "standard webhooks test secret", secret: standardWebhooksSecret, want: stdKey},
		{name: "24 bytes", secret: secret(24), want: bytes.Repeat([]byte{0xa5}, 24)},
		{name: "32 bytes", secret: secret(32), want: bytes.Repeat([]byte{0xa5}, 32)},
		{name: "64 bytes", secret: secret(64), want: bytes.Repeat([]byte{0xa5}, 64)},

		{name: "no prefix", secret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: `must start with "whsec_"`},
		{name: "other prefix", secret: "wh_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: `must start with "whsec_"`},
		{name: "upper-case prefix", secret: "WHSEC_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: `must start with "whsec_"`},
		{name: "empty", secret: "", wantErr: "must start with"},
		{name: "prefix only", secret: "whsec_", wantErr: "between 24 and 64 bytes, got 0"},
		{name: "not base64", secret: "whsec_not*base64*at*all*not*base64*", wantErr: "standard base64"},
		{name: "url-safe alphabet", secret: "whsec_" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 24)), wantErr: "standard base64"},
		{name: "missing padding", secret: "whsec_" + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 25)), wantErr: "standard base64"},
		{name: "trailing space", secret: standardWebhooksSecret + " ", wantErr: "standard base64"},
		{name: "23 bytes", secret: secret(23), wantErr: "between 24 and 64 bytes, got 23"},
		{name: "65 bytes", secret: secret(65), wantErr: "between 24 and 64 bytes, got 65"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			key, err := DecodeSecret(tt.secret)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				require.Nil(t, key)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, key)
		})
	}
}
