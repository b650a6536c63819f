package webhook

import (
	"net/url"
	"slices"
	"strings"
)

// A custom header value often is the endpoint's credential: it is sent
// only to the origin (scheme, host and port) it was set for. A change of
// URL to another origin clears the values that the same request does not
// give again; a value written back as responses show it (masked) is the
// old origin's and is not given again.

// Origin is the scheme, host and port of a webhook URL, the port written
// out when the URL leaves it to the scheme; "" when raw is no URL.
func Origin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}

// headersForNewOrigin returns the headers of a webhook whose URL moves to
// another origin, and the names of those whose values it cleared: all of
// them when the request gave no headers (given nil), else those it gave
// masked.
func headersForNewOrigin(h Headers, given *map[string]string) (Headers, []string) {
	kept := make(Headers, len(h))
	var cleared []string
	for name, v := range h {
		if given == nil || looksMasked(v) {
			cleared = append(cleared, name)
			continue
		}
		kept[name] = v
	}
	slices.Sort(cleared)
	return kept, cleared
}

// looksMasked reports whether a header value has the form of a masked one
// (MaskHeaderValue).
func looksMasked(v string) bool {
	return v == maskShort || strings.HasSuffix(v, "…")
}
