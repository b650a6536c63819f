package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/signature"
	"github.com/hookline/hookline/internal/webhook"
)

// The Standard Webhooks published test vector.
const (
	vectorSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID     = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTS     = int64(1614265330)
	vectorBody   = `{"test": 2432232314}`
	vectorSig    = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

const tolerance = 5 * time.Minute

func mustKey(t *testing.T, secret string) []byte {
	t.Helper()
	key, err := webhook.DecodeSecret(secret)
	require.NoError(t, err)
	return key
}

func TestStandardPublishedVector(t *testing.T) {
	t.Parallel()
	key := mustKey(t, vectorSecret)
	got := signature.Standard(vectorID, vectorTS, []byte(vectorBody), key)
	require.Equal(t, vectorSig, got)

	err := signature.VerifyStandard(vectorSecret, vectorID, strconv.FormatInt(vectorTS, 10), vectorSig,
		[]byte(vectorBody), time.Unix(vectorTS, 0), tolerance)
	require.NoError(t, err)
}

func TestLegacyHandComputedVector(t *testing.T) {
	t.Parallel()
	key := mustKey(t, vectorSecret)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("1614265330." + vectorBody))
	want := "t=1614265330,v1=" + hex.EncodeToString(m.Sum(nil))

	require.Equal(t, want, signature.Legacy(vectorTS, []byte(vectorBody), key))
	require.NoError(t, signature.VerifyLegacy(vectorSecret, want, []byte(vectorBody), time.Unix(vectorTS, 0), tolerance))
}

func TestStandardHandComputed(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	key := mustKey(t, secret)
	body := []byte(`{"id":"evt_1","data":{}}`)
	m := hmac.New(sha256.New, key)
	m.Write([]byte("msg_1.1700000000." + string(body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	require.Equal(t, want, signature.Standard("msg_1", 1700000000, body, key))
}

func TestRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret, otherSecret := webhook.NewSecret(), webhook.NewSecret(), webhook.NewSecret()
	oldKey, newKey := mustKey(t, oldSecret), mustKey(t, newSecret)
	body := []byte(`{"rotation":true}`)
	now := time.Unix(1700000000, 0)
	ts := now.Unix()
	tsHeader := strconv.FormatInt(ts, 10)

	std := signature.Standard("msg_rot", ts, body, newKey, oldKey)
	stdValues := strings.Split(std, " ")
	require.Len(t, stdValues, 2)
	require.Equal(t, signature.Standard("msg_rot", ts, body, newKey), stdValues[0])
	require.Equal(t, signature.Standard("msg_rot", ts, body, oldKey), stdValues[1])

	leg := signature.Legacy(ts, body, newKey, oldKey)
	require.Equal(t, 2, strings.Count(leg, ",v1="))
	require.True(t, strings.HasPrefix(leg, "t="+tsHeader+",v1="))

	// Each single value verifies with its own secret only.
	require.NoError(t, signature.VerifyStandard(newSecret, "msg_rot", tsHeader, stdValues[0], body, now, tolerance))
	require.NoError(t, signature.VerifyStandard(oldSecret, "msg_rot", tsHeader, stdValues[1], body, now, tolerance))
	require.ErrorIs(t, signature.VerifyStandard(oldSecret, "msg_rot", tsHeader, stdValues[0], body, now, tolerance), signature.ErrNoMatch)
	require.NoError(t, signature.VerifyLegacy(newSecret, signature.Legacy(ts, body, newKey), body, now, tolerance))
	require.NoError(t, signature.VerifyLegacy(oldSecret, signature.Legacy(ts, body, oldKey), body, now, tolerance))

	// The rotation headers verify with either secret, and not with a third.
	for _, secret := range []string{newSecret, oldSecret} {
		require.NoError(t, signature.VerifyStandard(secret, "msg_rot", tsHeader, std, body, now, tolerance))
		require.NoError(t, signature.VerifyLegacy(secret, leg, body, now, tolerance))
	}
	require.ErrorIs(t, signature.VerifyStandard(otherSecret, "msg_rot", tsHeader, std, body, now, tolerance), signature.ErrNoMatch)
	require.ErrorIs(t, signature.VerifyLegacy(otherSecret, leg, body, now, tolerance), signature.ErrNoMatch)
}

func TestVerifyStandard(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	key := mustKey(t, secret)
	now := time.Unix(1700000000, 0)
	ts := now.Unix()
	body := []byte(`{"hello":"world"}`)
	good := signature.Standard("msg_a", ts, body, key)
	itoa := func(v int64) string { return strconv.FormatInt(v, 10) }
	wrongLen := "v1," + base64.StdEncoding.EncodeToString([]byte("short"))

	tests := []struct {
		name   string
		secret string
		id     string
		ts     string
		sig    string
		body   string
		want   error
	}{
		{name: "valid", id: "msg_a", ts: itoa(ts), sig: good},
		{name: "valid among other versions", id: "msg_a", ts: itoa(ts), sig: "v1a,xyz " + good + " v2,abc"},
		{name: "valid after a wrong v1", id: "msg_a", ts: itoa(ts), sig: signature.Standard("msg_a", ts, body, mustKey(t, webhook.NewSecret())) + " " + good},
		{name: "valid at the past edge", id: "msg_a", ts: itoa(ts - 300), sig: signature.Standard("msg_a", ts-300, body, key)},
		{name: "valid at the future edge", id: "msg_a", ts: itoa(ts + 300), sig: signature.Standard("msg_a", ts+300, body, key)},
		{name: "tampered body", id: "msg_a", ts: itoa(ts), sig: good, body: `{"hello":"World"}`, want: signature.ErrNoMatch},
		{name: "tampered id", id: "msg_b", ts: itoa(ts), sig: good, want: signature.ErrNoMatch},
		{name: "tampered timestamp", id: "msg_a", ts: itoa(ts + 1), sig: good, want: signature.ErrNoMatch},
		{name: "wrong secret", secret: webhook.NewSecret(), id: "msg_a", ts: itoa(ts), sig: good, want: signature.ErrNoMatch},
		{name: "stale", id: "msg_a", ts: itoa(ts - 301), sig: signature.Standard("msg_a", ts-301, body, key), want: signature.ErrTimestamp},
		{name: "future", id: "msg_a", ts: itoa(ts + 301), sig: signature.Standard("msg_a", ts+301, body, key), want: signature.ErrTimestamp},
		{name: "far future", id: "msg_a", ts: "9223372036854775807", sig: good, want: signature.ErrTimestamp},
		{name: "empty id", id: "", ts: itoa(ts), sig: good, want: signature.ErrMalformed},
		{name: "missing timestamp", id: "msg_a", ts: "", sig: good, want: signature.ErrMalformed},
		{name: "non-numeric timestamp", id: "msg_a", ts: "17e8", sig: good, want: signature.ErrMalformed},
		{name: "signed timestamp", id: "msg_a", ts: "+" + itoa(ts), sig: good, want: signature.ErrMalformed},
		{name: "overflowing timestamp", id: "msg_a", ts: "99999999999999999999", sig: good, want: signature.ErrMalformed},
		{name: "empty signature", id: "msg_a", ts: itoa(ts), sig: "", want: signature.ErrMalformed},
		{name: "no v1", id: "msg_a", ts: itoa(ts), sig: "v2," + strings.TrimPrefix(good, "v1,"), want: signature.ErrMalformed},
		{name: "no comma", id: "msg_a", ts: itoa(ts), sig: strings.TrimPrefix(good, "v1,"), want: signature.ErrMalformed},
		{name: "bad base64", id: "msg_a", ts: itoa(ts), sig: "v1,not*base64!", want: signature.ErrMalformed},
		{name: "url base64", id: "msg_a", ts: itoa(ts), sig: strings.NewReplacer("+", "-", "/", "_").Replace(good) + "-_", want: signature.ErrMalformed},
		{name: "wrong length", id: "msg_a", ts: itoa(ts), sig: wrongLen, want: signature.ErrMalformed},
		{name: "legacy format in standard header", id: "msg_a", ts: itoa(ts), sig: signature.Legacy(ts, body, key), want: signature.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, b := secret, body
			if tt.secret != "" {
				s = tt.secret
			}
			if tt.body != "" {
				b = []byte(tt.body)
			}
			err := signature.VerifyStandard(s, tt.id, tt.ts, tt.sig, b, now, tolerance)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
			requireOnlySentinel(t, err, tt.want)
		})
	}
}

func TestVerifyLegacy(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	key := mustKey(t, secret)
	now := time.Unix(1700000000, 0)
	ts := now.Unix()
	body := []byte(`{"hello":"world"}`)
	good := signature.Legacy(ts, body, key)
	goodHex := strings.TrimPrefix(good, "t=1700000000,v1=")
	require.Len(t, goodHex, 64)

	tests := []struct {
		name   string
		secret string
		sig    string
		body   string
		want   error
	}{
		{name: "valid", sig: good},
		{name: "valid with spaces and unknown keys", sig: "t=1700000000, v0=abc, v1=" + goodHex},
		{name: "valid v1 before t", sig: "v1=" + goodHex + ",t=1700000000"},
		{name: "valid uppercase hex", sig: "t=1700000000,v1=" + strings.ToUpper(goodHex)},
		{name: "valid after a wrong v1", sig: signature.Legacy(ts, body, mustKey(t, webhook.NewSecret())) + ",v1=" + goodHex},
		{name: "valid at the past edge", sig: signature.Legacy(ts-300, body, key)},
		{name: "valid at the future edge", sig: signature.Legacy(ts+300, body, key)},
		{name: "tampered body", sig: good, body: `{"hello":"world!"}`, want: signature.ErrNoMatch},
		{name: "tampered timestamp", sig: "t=1700000001,v1=" + goodHex, want: signature.ErrNoMatch},
		{name: "wrong secret", secret: webhook.NewSecret(), sig: good, want: signature.ErrNoMatch},
		{name: "stale", sig: signature.Legacy(ts-301, body, key), want: signature.ErrTimestamp},
		{name: "future", sig: signature.Legacy(ts+301, body, key), want: signature.ErrTimestamp},
		{name: "empty", sig: "", want: signature.ErrMalformed},
		{name: "missing t", sig: "v1=" + goodHex, want: signature.ErrMalformed},
		{name: "empty t", sig: "t=,v1=" + goodHex, want: signature.ErrMalformed},
		{name: "non-numeric t", sig: "t=abc,v1=" + goodHex, want: signature.ErrMalformed},
		{name: "negative t", sig: "t=-1700000000,v1=" + goodHex, want: signature.ErrMalformed},
		{name: "two t", sig: "t=1700000000,t=1700000000,v1=" + goodHex, want: signature.ErrMalformed},
		{name: "no v1", sig: "t=1700000000", want: signature.ErrMalformed},
		{name: "only other versions", sig: "t=1700000000,v0=" + goodHex, want: signature.ErrMalformed},
		{name: "element without =", sig: "t=1700000000,v1" + goodHex, want: signature.ErrMalformed},
		{name: "bad hex", sig: "t=1700000000,v1=" + strings.Repeat("zz", 32), want: signature.ErrMalformed},
		{name: "odd hex", sig: "t=1700000000,v1=" + goodHex[:63], want: signature.ErrMalformed},
		{name: "short hex", sig: "t=1700000000,v1=" + goodHex[:62], want: signature.ErrMalformed},
		{name: "standard format in legacy header", sig: signature.Standard("msg_a", ts, body, key), want: signature.ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, b := secret, body
			if tt.secret != "" {
				s = tt.secret
			}
			if tt.body != "" {
				b = []byte(tt.body)
			}
			err := signature.VerifyLegacy(s, tt.sig, b, now, tolerance)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.want)
			requireOnlySentinel(t, err, tt.want)
		})
	}
}

func TestVerifyInvalidSecret(t *testing.T) {
	t.Parallel()
	now := time.Unix(vectorTS, 0)
	body := []byte(vectorBody)
	for _, secret := range []string{"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_!!!", "whsec_" + base64.StdEncoding.EncodeToString([]byte("short"))} {
		errStd := signature.VerifyStandard(secret, vectorID, "1614265330", vectorSig, body, now, tolerance)
		require.Error(t, errStd, secret)
		requireOnlySentinel(t, errStd, nil)
		errLeg := signature.VerifyLegacy(secret, "t=1614265330,v1="+strings.Repeat("00", 32), body, now, tolerance)
		require.Error(t, errLeg, secret)
		requireOnlySentinel(t, errLeg, nil)
	}
}

func TestSignNoKeys(t *testing.T) {
	t.Parallel()
	require.Empty(t, signature.Standard("msg", 1, nil))
	require.Equal(t, "t=1", signature.Legacy(1, nil))
}

// requireOnlySentinel checks that err wraps want (nil: none) and no other
// sentinel, so callers can tell the cases apart.
func requireOnlySentinel(t *testing.T, err, want error) {
	t.Helper()
	for _, s := range []error{signature.ErrMalformed, signature.ErrTimestamp, signature.ErrNoMatch} {
		require.Equal(t, errors.Is(err, s), s == want, "error %q vs sentinel %q", err, s)
	}
}
