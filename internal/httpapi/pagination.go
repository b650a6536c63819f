package httpapi

import (
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
)

const (
	defaultLimit = 50
	maxLimit     = 500
)

// page is the parsed limit and cursor of a list request.
type page struct {
	Limit int
	After *uuid.UUID
}

// parsePage reads ?limit= (default 50, max 500) and ?cursor=.
func parsePage(c *gin.Context) (page, error) {
	p := page{Limit: defaultLimit}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLimit {
			return p, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Field: "limit",
				Message: "limit: must be an integer between 1 and 500"}
		}
		p.Limit = n
	}
	if v := c.Query("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		id, perr := uuid.FromBytes(raw)
		if err != nil || perr != nil {
			return p, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Field: "cursor",
				Message: "cursor: not a cursor returned by this API"}
		}
		p.After = &id
	}
	return p, nil
}

// encodeCursor makes the opaque cursor that continues after id.
func encodeCursor(id uuid.UUID) string {
	return base64.RawURLEncoding.EncodeToString(id[:])
}

// listResponse is {"data": [...], "next_cursor": "..."}. Callers fetch one
// row more than the limit; its presence means there is a next page.
func listResponse[T any](items []T, limit int, idOf func(T) uuid.UUID) gin.H {
	next := ""
	if len(items) > limit {
		items = items[:limit]
		next = encodeCursor(idOf(items[limit-1]))
	}
	if items == nil {
		items = []T{}
	}
	return gin.H{"data": items, "next_cursor": next}
}

// pathID parses the :name path parameter as a UUID; a malformed id is the
// same 404 as an unknown one.
func pathID(c *gin.Context, name string) (uuid.UUID, error) {
	id, err := uuid.Parse(c.Param(name))
	if err != nil {
		return uuid.Nil, errNotFound
	}
	return id, nil
}

func parseBoolQuery(c *gin.Context, name string) (*bool, error) {
	v := c.Query(name)
	if v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return nil, &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Field: name,
			Message: name + ": must be true or false"}
	}
	return &b, nil
}
