package tenant

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/fielderr"
)

// A name Postgres cannot store is refused as a field, on create and on
// rename, instead of failing the insert.
func TestBuildRefusesUnstorableName(t *testing.T) {
	t.Parallel()
	base := WithDefaults(config.Default().Defaults)
	for _, name := range []string{"a\x00b", "caf\xe9", "\xed\xa0\x80"} {
		for _, creating := range []bool{true, false} {
			_, err := Build(base, Input{Name: ptr(name)}, creating)
			var fe *fielderr.Error
			require.ErrorAs(t, err, &fe, "%q", name)
			require.Equal(t, "name", fe.Field)
		}
	}
	_, err := Build(base, Input{Name: ptr("café")}, true)
	require.NoError(t, err)
}

// Portal settings end up in the portal's Content-Security-Policy: nothing
// but a plain scheme://host[:port] gets there.
func TestPortalSettingsRefuseWhatCouldBendThePolicy(t *testing.T) {
	t.Parallel()
	build := func(p PortalInput) error {
		_, err := Build(Tenant{Name: "acme", RateLimit: config.RateLimit{RequestsPerMinute: 1, Burst: 1},
			PublishRateLimit: config.PublishRateLimit{RequestsPerSecond: 1, Burst: 1}}, Input{Portal: &p}, false)
		return err
	}
	str := func(s string) *string { return &s }
	for _, bad := range []string{"https://cdn.example.com;frame-ancestors/x.png", "https://*/x.png", "https://a.com,b/x.png",
		"http://cdn.example.com/x.png", "https://user@cdn.example.com/x.png", "https://cdn.example.com:99999/x.png", "https:///x.png"} {
		require.Error(t, build(PortalInput{LogoURL: str(bad)}), bad)
	}
	require.NoError(t, build(PortalInput{LogoURL: str("https://cdn.example.com:8443/logo.png")}))
	for _, bad := range []string{"https://app.example.com;script-src", "https://*.example.com", "https://a.com,b", "https://app.example.com/path",
		"ftp://app.example.com", "app.example.com"} {
		require.Error(t, build(PortalInput{FrameOrigins: &[]string{bad}}), bad)
	}
	require.NoError(t, build(PortalInput{FrameOrigins: &[]string{"https://App.Example.com", "http://localhost:3000"}}))
	require.Error(t, build(PortalInput{AccentColor: str("red;}body{display:none")}))
}
