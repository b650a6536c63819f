// Package signature signs webhook requests and verifies their signatures in
// the two forms hookline sends with every delivery:
//
//   - the Standard Webhooks header
//     webhook-signature: v1,<base64 HMAC-SHA256 of "msgID.timestamp.body">
//   - the hookline header
//     X-Webhook-Signature: t=<timestamp>,v1=<hex HMAC-SHA256 of "timestamp.body">
//
// Both use the decoded bytes of a whsec_ secret as the HMAC key. During a
// secret rotation several keys sign, giving several v1 values; a verifier
// accepts the request when any of them matches.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hookline/hookline/internal/webhook"
)

// Sentinel errors returned, wrapped with context, by VerifyStandard and
// VerifyLegacy. Test for them with errors.Is.
var (
	// ErrMalformed means a header is missing or cannot be parsed.
	ErrMalformed = errors.New("malformed signature header")
	// ErrTimestamp means the signed timestamp is further from now than the
	// tolerance, in either direction.
	ErrTimestamp = errors.New("signature timestamp outside tolerance")
	// ErrNoMatch means no v1 value matches the expected signature.
	ErrNoMatch = errors.New("no matching signature")
)

// Standard returns the Standard Webhooks webhook-signature header value:
// for each key, "v1," followed by the standard base64 of
// HMAC-SHA256(key, msgID + "." + timestamp + "." + body), joined by single
// spaces in the order of keys (current key first during a rotation).
func Standard(msgID string, timestamp int64, body []byte, keys ...[]byte) string {
	parts := make([]string, len(keys))
	for i, key := range keys {
		parts[i] = "v1," + base64.StdEncoding.EncodeToString(standardMAC(key, msgID, timestamp, body))
	}
	return strings.Join(parts, " ")
}

// Legacy returns the X-Webhook-Signature header value:
// "t=<timestamp>" followed by ",v1=<lowercase hex HMAC-SHA256(key,
// timestamp + "." + body)>" for each key, in the order of keys.
func Legacy(timestamp int64, body []byte, keys ...[]byte) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(timestamp, 10))
	for _, key := range keys {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(legacyMAC(key, timestamp, body)))
	}
	return b.String()
}

// VerifyStandard checks the Standard Webhooks headers of a request:
// msgID is the webhook-id header, timestampHeader the webhook-timestamp
// header (unix seconds) and signatureHeader the webhook-signature header.
// It accepts the request when the timestamp is within tolerance of now and
// any v1 value is the signature of body under secret (a whsec_ string).
// It returns an error wrapping ErrMalformed, ErrTimestamp or ErrNoMatch, or
// a plain error when secret itself is invalid.
func VerifyStandard(secret, msgID, timestampHeader, signatureHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := webhook.DecodeSecret(secret)
	if err != nil {
		return fmt.Errorf("decode secret: %w", err)
	}
	if msgID == "" {
		return fmt.Errorf("%w: empty webhook-id", ErrMalformed)
	}
	ts, err := parseUnix(timestampHeader)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp: %v", ErrMalformed, err)
	}
	if err := checkTimestamp(ts, now, tolerance); err != nil {
		return err
	}
	sigs, err := parseStandard(signatureHeader)
	if err != nil {
		return fmt.Errorf("%w: webhook-signature: %v", ErrMalformed, err)
	}
	if !anyEqual(standardMAC(key, msgID, ts, body), sigs) {
		return fmt.Errorf("%w: webhook-signature has %d v1 value(s), none valid", ErrNoMatch, len(sigs))
	}
	return nil
}

// VerifyLegacy checks an X-Webhook-Signature header
// ("t=<timestamp>,v1=<hex>[,v1=<hex>...]"). It accepts the request when the
// timestamp t is within tolerance of now and any v1 value is the signature
// of body under secret (a whsec_ string). Elements other than t and v1 are
// ignored. It returns an error wrapping ErrMalformed, ErrTimestamp or
// ErrNoMatch, or a plain error when secret itself is invalid.
func VerifyLegacy(secret, signatureHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	key, err := webhook.DecodeSecret(secret)
	if err != nil {
		return fmt.Errorf("decode secret: %w", err)
	}
	ts, sigs, err := parseLegacy(signatureHeader)
	if err != nil {
		return fmt.Errorf("%w: X-Webhook-Signature: %v", ErrMalformed, err)
	}
	if err := checkTimestamp(ts, now, tolerance); err != nil {
		return err
	}
	if !anyEqual(legacyMAC(key, ts, body), sigs) {
		return fmt.Errorf("%w: X-Webhook-Signature has %d v1 value(s), none valid", ErrNoMatch, len(sigs))
	}
	return nil
}

func standardMAC(key []byte, msgID string, timestamp int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, timestamp, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

func legacyMAC(key []byte, timestamp int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(strconv.AppendInt(nil, timestamp, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// anyEqual reports whether any of sigs equals want, comparing each in
// constant time.
func anyEqual(want []byte, sigs [][]byte) bool {
	ok := false
	for _, sig := range sigs {
		if hmac.Equal(want, sig) {
			ok = true
		}
	}
	return ok
}

func checkTimestamp(ts int64, now time.Time, tolerance time.Duration) error {
	age := now.Sub(time.Unix(ts, 0))
	if age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: timestamp %d is %s from now, tolerance %s", ErrTimestamp, ts, age.Truncate(time.Second), tolerance)
	}
	return nil
}

// parseUnix parses unix seconds written as plain decimal digits.
func parseUnix(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("empty timestamp")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("timestamp %q is not decimal unix seconds", s)
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp %q: %v", s, err)
	}
	return ts, nil
}

// parseStandard returns the decoded v1 values of a webhook-signature header.
// Space-separated "<version>,<signature>" elements with another version are
// ignored; at least one v1 value is required, and every v1 value must be the
// base64 of a SHA-256 HMAC.
func parseStandard(h string) ([][]byte, error) {
	var sigs [][]byte
	for _, elem := range strings.Fields(h) {
		version, enc, ok := strings.Cut(elem, ",")
		if !ok {
			return nil, fmt.Errorf("element %q is not <version>,<signature>", elem)
		}
		if version != "v1" {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(enc)
		if err != nil || len(sig) != sha256.Size {
			return nil, fmt.Errorf("v1 value %q is not the base64 of a SHA-256 HMAC", enc)
		}
		sigs = append(sigs, sig)
	}
	if len(sigs) == 0 {
		return nil, errors.New("no v1 value")
	}
	return sigs, nil
}

// parseLegacy returns the timestamp and decoded v1 values of an
// X-Webhook-Signature header. Exactly one t and at least one v1 are
// required; other keys are ignored.
func parseLegacy(h string) (int64, [][]byte, error) {
	var (
		ts    int64
		haveT bool
		sigs  [][]byte
	)
	for _, elem := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(elem), "=")
		if !ok {
			return 0, nil, fmt.Errorf("element %q is not key=value", elem)
		}
		switch k {
		case "t":
			if haveT {
				return 0, nil, errors.New("more than one t")
			}
			var err error
			if ts, err = parseUnix(v); err != nil {
				return 0, nil, err
			}
			haveT = true
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return 0, nil, fmt.Errorf("v1 value %q is not the hex of a SHA-256 HMAC", v)
			}
			sigs = append(sigs, sig)
		}
	}
	if !haveT {
		return 0, nil, errors.New("no t")
	}
	if len(sigs) == 0 {
		return 0, nil, errors.New("no v1 value")
	}
	return ts, sigs, nil
}
