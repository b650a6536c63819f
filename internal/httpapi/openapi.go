package httpapi

import (
	_ "embed"

	"github.com/gin-gonic/gin"
)

// openAPIDoc describes every route of Handler; a test fails when a route is
// missing from it.
//
//go:embed openapi.json
var openAPIDoc []byte

func serveOpenAPI(c *gin.Context) {
	c.Data(200, "application/json", openAPIDoc)
}
