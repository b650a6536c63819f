package httpapi

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// referenceFS is the API reference served at /docs: a page that renders
// /openapi.json with Redoc's standalone bundle. Every file the page needs
// is here, so the reference works without any other origin (see
// reference/README.md for where the bundle comes from).
//
//go:embed reference/index.html reference/reference.js reference/redoc.standalone.js reference/LICENSE.redoc reference/redoc.standalone.js.LICENSE.txt
var referenceFS embed.FS

// referenceCSP lets the page load scripts and data from its own origin
// only. Redoc writes its styles into the page (inline style elements)
// and runs its search index in a worker it makes from a blob: URL.
const referenceCSP = "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self'; connect-src 'self'; worker-src blob:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// referenceFile is one file of the reference, with its content type and
// an ETag of its content.
type referenceFile struct {
	body        []byte
	contentType string
	etag        string
}

// referenceFiles are the files under /docs/, by name.
var referenceFiles = map[string]referenceFile{
	"redoc.standalone.js":             loadReferenceFile("redoc.standalone.js", "text/javascript; charset=utf-8"),
	"reference.js":                    loadReferenceFile("reference.js", "text/javascript; charset=utf-8"),
	"LICENSE.redoc":                   loadReferenceFile("LICENSE.redoc", "text/plain; charset=utf-8"),
	"redoc.standalone.js.LICENSE.txt": loadReferenceFile("redoc.standalone.js.LICENSE.txt", "text/plain; charset=utf-8"),
}

var referencePage = loadReferenceFile("index.html", "text/html; charset=utf-8")

func loadReferenceFile(name, contentType string) referenceFile {
	b, err := referenceFS.ReadFile("reference/" + name)
	if err != nil {
		panic("httpapi: reference/" + name + " is not embedded: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return referenceFile{body: b, contentType: contentType, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
}

// serveReference answers GET /docs: the page of the API reference.
func serveReference(c *gin.Context) {
	referencePage.serve(c)
}

// serveReferenceFile answers GET /docs/{file}: the script the page runs,
// or a licence of the bundle.
func serveReferenceFile(c *gin.Context) {
	f, ok := referenceFiles[c.Param("file")]
	if !ok {
		abort(c, errNotFound)
		return
	}
	f.serve(c)
}

// serve writes the file with the reference's security headers; a client
// that has it already (If-None-Match) gets 304.
func (f referenceFile) serve(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", referenceCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Type", f.contentType)
	h.Set("ETag", f.etag)
	http.ServeContent(c.Writer, c.Request, "", time.Time{}, bytes.NewReader(f.body))
}
