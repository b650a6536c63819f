package secret

import "strings"

// secretWords mark a header name as secret-looking.
var secretWords = []string{"token", "secret", "key", "cookie", "auth", "signature", "session", "password", "credential"}

// LooksSecret reports whether a header named name may carry a credential:
// Set-Cookie, Authorization, WWW-Authenticate, our own signature headers,
// and any name containing token, secret, key, cookie, auth, signature,
// session, password or credential (case-insensitive).
func LooksSecret(name string) bool {
	lower := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(lower, w) {
			return true
		}
	}
	return false
}

// StorableHeaders returns h without its secret-looking headers; h is not
// modified.
func StorableHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		if !LooksSecret(k) {
			out[k] = v
		}
	}
	return out
}
