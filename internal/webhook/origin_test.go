package webhook

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOrigin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ url, want string }{
		{"https://example.com/hooks", "https://example.com:443"},
		{"https://EXAMPLE.com:443/other?x=1", "https://example.com:443"},
		{"http://example.com/hooks", "http://example.com:80"},
		{"https://example.com:8443/hooks", "https://example.com:8443"},
		{"https://[2001:db8::1]/hooks", "https://2001:db8::1:443"},
		{"not a url", ""},
	} {
		require.Equal(t, tc.want, Origin(tc.url), tc.url)
	}
	require.NotEqual(t, Origin("https://example.com/a"), Origin("https://example.com.evil.test/a"))
}

// A URL moved to another origin keeps only the header values the request
// gave again, never a masked one; the same origin keeps them all.
func TestBuildClearsHeaderValuesForAnotherOrigin(t *testing.T) {
	t.Parallel()
	r := Rules{}
	base := Webhook{URL: "https://8.8.8.8/hooks", Headers: Headers{"X-Token": "secret-value-1", "X-Team": "billing"}}
	moved := "https://1.1.1.1/hooks"
	w, err := r.Build(t.Context(), base, Input{URL: &moved}, false)
	require.NoError(t, err)
	require.Empty(t, w.Headers)
	require.Equal(t, []string{"X-Team", "X-Token"}, w.ClearedHeaders)

	given := map[string]string{"X-Token": "secret-value-2", "X-Team": MaskHeaderValue("billing")}
	w, err = r.Build(t.Context(), base, Input{URL: &moved, Headers: &given}, false)
	require.NoError(t, err)
	require.Equal(t, Headers{"X-Token": "secret-value-2"}, w.Headers)
	require.Equal(t, []string{"X-Team"}, w.ClearedHeaders)

	samePlace := "https://8.8.8.8:443/elsewhere"
	w, err = r.Build(t.Context(), base, Input{URL: &samePlace}, false)
	require.NoError(t, err)
	require.Equal(t, base.Headers, w.Headers)
	require.Nil(t, w.ClearedHeaders)
}
