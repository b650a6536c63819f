package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// redocSHA256 is the sha256 of bundles/redoc.standalone.js in the npm
// package redoc@2.5.4, as reference/README.md gives it: the vendored file
// is that file, unchanged.
const redocSHA256 = "dcaf76612bc4a3fbcc923a8966dee2f6146a5f32e5ce1b6f02dd60cbbf89500b"

// /docs and the files it loads come from the binary, with a
// Content-Security-Policy that allows this origin only; a file that is not
// there is a JSON 404, and a client that has a file already gets 304.
func TestReferenceIsServedFromTheBinary(t *testing.T) {
	t.Parallel()
	e := newAPI(t)

	page := e.do("GET", "/docs", "", nil)
	require.Equal(t, http.StatusOK, page.Status)
	require.Equal(t, "text/html; charset=utf-8", page.Header.Get("Content-Type"))
	require.Contains(t, string(page.Raw), `<script src="/docs/redoc.standalone.js"></script>`)
	require.Contains(t, string(page.Raw), `<script src="/docs/reference.js"></script>`)
	csp := page.Header.Get("Content-Security-Policy")
	require.Equal(t, referenceCSP, csp)
	for _, directive := range strings.Split(csp, ";") {
		words := strings.Fields(directive)
		require.NotEmpty(t, words, "an empty directive in %q", csp)
		for _, source := range words[1:] {
			require.NotContains(t, []string{"*", "http:", "https:", "'unsafe-eval'"}, source, "the CSP allows %s", source)
			require.NotContains(t, source, "://", "the CSP names another origin")
		}
	}
	require.Equal(t, "nosniff", page.Header.Get("X-Content-Type-Options"))

	bundle := e.do("GET", "/docs/redoc.standalone.js", "", nil)
	require.Equal(t, http.StatusOK, bundle.Status)
	require.Equal(t, "text/javascript; charset=utf-8", bundle.Header.Get("Content-Type"))
	sum := sha256.Sum256(bundle.Raw)
	require.Equal(t, redocSHA256, hex.EncodeToString(sum[:]))
	require.Equal(t, referenceCSP, bundle.Header.Get("Content-Security-Policy"))

	again := e.do("GET", "/docs/redoc.standalone.js", "", nil, "If-None-Match", bundle.Header.Get("ETag"))
	require.Equal(t, http.StatusNotModified, again.Status)
	require.Empty(t, again.Raw)

	for _, name := range []string{"reference.js", "LICENSE.redoc", "redoc.standalone.js.LICENSE.txt"} {
		r := e.do("GET", "/docs/"+name, "", nil)
		require.Equal(t, http.StatusOK, r.Status, name)
		require.NotEmpty(t, r.Raw, name)
	}
	require.Contains(t, string(e.do("GET", "/docs/LICENSE.redoc", "", nil).Raw), "The MIT License")

	missing := e.do("GET", "/docs/redoc.standalone.js.map", "", nil)
	require.Equal(t, http.StatusNotFound, missing.Status)
	require.Equal(t, "not_found", missing.errCode())
}
