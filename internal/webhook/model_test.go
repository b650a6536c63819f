package webhook

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestActiveSecrets(t *testing.T) {
	t.Parallel()

	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	const cur, prev = "whsec_current", "whsec_previous"

	tests := []struct {
		name      string
		previous  string
		expiresAt *time.Time
		want      []string
	}{
		{"never rotated", "", nil, []string{cur}},
		{"in grace period", prev, at(time.Hour), []string{cur, prev}},
		{"last nanosecond of grace", prev, at(time.Nanosecond), []string{cur, prev}},
		{"grace ends now", prev, at(0), []string{cur}},
		{"grace ended", prev, at(-time.Second), []string{cur}},
		{"previous without expiry", prev, nil, []string{cur}},
		{"expiry without previous", "", at(time.Hour), []string{cur}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := Webhook{Secret: cur, PreviousSecret: tt.previous, PreviousSecretExpiresAt: tt.expiresAt}
			require.Equal(t, tt.want, w.ActiveSecrets(now))
		})
	}
}

func TestActiveSecretsAcrossARotation(t *testing.T) {
	t.Parallel()

	rotated := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	grace := 24 * time.Hour
	expires := rotated.Add(grace)
	w := Webhook{Secret: "whsec_new", PreviousSecret: "whsec_old", PreviousSecretExpiresAt: &expires}

	require.Equal(t, []string{"whsec_new", "whsec_old"}, w.ActiveSecrets(rotated))
	require.Equal(t, []string{"whsec_new", "whsec_old"}, w.ActiveSecrets(rotated.Add(grace-time.Millisecond)))
	require.Equal(t, []string{"whsec_new"}, w.ActiveSecrets(rotated.Add(grace)))
	require.Equal(t, []string{"whsec_new"}, w.ActiveSecrets(rotated.Add(48*time.Hour)))
	// A different time zone for the same instant changes nothing.
	require.Equal(t, []string{"whsec_new", "whsec_old"}, w.ActiveSecrets(rotated.In(time.FixedZone("x", 5*3600))))
}
