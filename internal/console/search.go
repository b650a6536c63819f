package console

import (
	"errors"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/event"
	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/history"
)

type searchData struct {
	base
	Query string
	// Missed is set when the query found nothing.
	Missed bool
}

// searchPage finds what an operator pasted from a log or a support
// ticket: a delivery id, an event id or an idempotency key of the
// session's tenant, and sends the browser to its page. Every lookup is
// scoped to the tenant, so that another tenant's id finds nothing.
func (c *Console) searchPage(ctx *gin.Context) {
	d := searchData{Query: strings.TrimSpace(ctx.Query("q"))}
	d.Title, d.Nav = "Search", "search"
	if d.Query == "" {
		c.render(ctx, http.StatusOK, "search", &d)
		return
	}
	to, err := c.find(ctx, d.Query)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	if to != "" {
		ctx.Redirect(http.StatusSeeOther, root(ctx)+to)
		return
	}
	d.Missed = true
	c.render(ctx, http.StatusNotFound, "search", &d)
}

// find returns the page (under the root) of what q names, or "" when it
// names nothing of the tenant. An id is tried as a delivery, then as an
// event; anything, ids included (publishers often use UUIDs as keys), as
// an idempotency key last.
func (c *Console) find(ctx *gin.Context, q string) (string, error) {
	rctx := ctx.Request.Context()
	tenantID := session(ctx).TenantID
	if id, err := uuid.Parse(q); err == nil {
		_, err := c.deliveries.Get(rctx, tenantID, id)
		switch {
		case err == nil:
			return "/deliveries/" + id.String(), nil
		case !errors.Is(err, history.ErrNotFound):
			return "", err
		}
		ev, err := c.events.Get(rctx, tenantID, id)
		switch {
		case err == nil:
			return "/events/" + ev.ID.String(), nil
		case !errors.Is(err, event.ErrNotFound):
			return "", err
		}
	}
	ev, err := c.events.GetByKey(rctx, tenantID, q)
	var fe *fielderr.Error
	switch {
	case err == nil:
		return "/events/" + ev.ID.String(), nil
	case errors.Is(err, event.ErrNotFound), errors.As(err, &fe):
		// A key no publish accepts names no event.
		return "", nil
	}
	return "", err
}
