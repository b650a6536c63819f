package console

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/tenant"
)

// The API keys page lists, creates and revokes the tenant's keys with the
// store calls of /v1/api-keys (which write the audit rows themselves) and
// the same rules: the tenant's last active key cannot be revoked. A new
// key is shown once, in the answer to the form that created it; it is
// never put in a URL or a log.

// keyForm is the create form, as typed.
type keyForm struct {
	Name, ExpiresAt string
}

// keyRow is a key as listed, with its state now.
type keyRow struct {
	tenant.Key
	// State is active, expired or revoked.
	State string
	// Current marks the key of the session looking at the page.
	Current bool
}

type apiKeysData struct {
	base
	Rows []keyRow
	Form keyForm
	// Created and Secret are the key just created and the key itself,
	// shown this once.
	Created *tenant.Key
	Secret  string
	// Newest is set when this is not the first page; Next when there is
	// a later one.
	Newest, Next string
	// MaxActive is how many active keys a tenant may hold.
	MaxActive int
}

// keyNotices are the messages the key actions' redirects ask for.
var keyNotices = map[string]string{
	"key_revoked": "API key revoked: it is refused from now on.",
}

// keyForgetter is the authentication cache (tenant.CachedAuth) that must
// drop a revoked key at once, as the REST API's revocation makes it.
type keyForgetter interface {
	Forget(keyID uuid.UUID)
}

// apiKeysPage lists the tenant's keys, oldest first, never the keys
// themselves.
func (c *Console) apiKeysPage(ctx *gin.Context) {
	d := apiKeysData{Form: keyForm{Name: "default"}}
	d.Notice = keyNotices[ctx.Query("notice")]
	c.renderKeys(ctx, http.StatusOK, &d)
}

// renderKeys fills d with a page of the tenant's keys and renders it.
func (c *Console) renderKeys(ctx *gin.Context, status int, d *apiKeysData) {
	s := session(ctx)
	after, ok := c.cursor(ctx, "after")
	if !ok {
		return
	}
	keys, err := c.tenants.ListKeys(ctx.Request.Context(), s.TenantID, after, pageSize+1)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	d.Title, d.Nav, d.MaxActive = "API keys", "api-keys", tenant.MaxActiveKeys
	if after != nil {
		d.Newest = root(ctx) + "/api-keys"
	}
	if len(keys) > pageSize {
		keys = keys[:pageSize]
		d.Next = root(ctx) + "/api-keys?after=" + keys[pageSize-1].ID.String()
	}
	now := c.now()
	for _, k := range keys {
		r := keyRow{Key: k, State: "active", Current: k.ID == s.KeyID}
		switch {
		case k.RevokedAt != nil:
			r.State = "revoked"
		case k.ExpiresAt != nil && !now.Before(*k.ExpiresAt):
			r.State = "expired"
		}
		d.Rows = append(d.Rows, r)
	}
	c.render(ctx, status, "apikeys", d)
}

// createAPIKey creates a key from the form and shows it, this once.
func (c *Console) createAPIKey(ctx *gin.Context) {
	s := session(ctx)
	d := apiKeysData{Form: keyForm{Name: ctx.PostForm("name"), ExpiresAt: strings.TrimSpace(ctx.PostForm("expires_at"))}}
	in := tenant.KeyInput{Name: &d.Form.Name}
	expires, ok := parseFormTime(d.Form.ExpiresAt)
	if !ok {
		d.Error = "Expires: enter a date and time (UTC), or leave it empty for a key that never expires."
		c.renderKeys(ctx, http.StatusBadRequest, &d)
		return
	}
	if expires != nil {
		v := expires.Format(time.RFC3339)
		in.ExpiresAt = &v
	}
	k, err := tenant.BuildKey(in, c.now())
	var secret string
	if err == nil {
		k, secret, err = c.tenants.CreateKey(ctx.Request.Context(), s.TenantID, k)
	}
	if msg := keyFormError(err); msg != "" {
		d.Error = msg
		c.renderKeys(ctx, http.StatusBadRequest, &d)
		return
	}
	if err != nil {
		c.fail(ctx, err)
		return
	}
	c.log.Info("api key created", "tenant_id", s.TenantID.String(), "api_key_id", k.ID.String(), "prefix", k.Prefix, "via", "console")
	d = apiKeysData{Form: keyForm{Name: "default"}, Created: &k, Secret: secret}
	c.renderKeys(ctx, http.StatusCreated, &d)
}

// keyFormError says what is wrong with the create form, or "" when err is
// not the form's fault.
func keyFormError(err error) string {
	var fe *fielderr.Error
	switch {
	case errors.As(err, &fe):
		label := map[string]string{"name": "Name", "expires_at": "Expires"}[fe.Field]
		if label == "" {
			label = fe.Field
		}
		return label + ": " + fe.Message + "."
	case errors.Is(err, tenant.ErrTooManyKeys):
		return "This tenant already holds the most active API keys allowed: revoke one first."
	}
	return ""
}

// revokeAPIKey revokes a key of the tenant, the session's own included
// (which signs it out); never the tenant's last active key.
func (c *Console) revokeAPIKey(ctx *gin.Context) {
	s := session(ctx)
	id, err := uuid.Parse(ctx.Param("id"))
	if err != nil {
		c.notFound(ctx)
		return
	}
	err = c.tenants.RevokeKey(ctx.Request.Context(), s.TenantID, id)
	switch {
	case errors.Is(err, tenant.ErrKeyNotFound), errors.Is(err, tenant.ErrNotFound):
		c.notFound(ctx)
		return
	case errors.Is(err, tenant.ErrLastKey):
		d := apiKeysData{Form: keyForm{Name: "default"}}
		d.Error = "Not revoked: this is the last active API key of the tenant. Create another one before revoking it."
		c.renderKeys(ctx, http.StatusConflict, &d)
		return
	case err != nil:
		c.fail(ctx, err)
		return
	}
	if f, ok := c.auth.(keyForgetter); ok {
		f.Forget(id)
	}
	c.log.Info("api key revoked", "tenant_id", s.TenantID.String(), "api_key_id", id.String(), "via", "console")
	ctx.Redirect(http.StatusSeeOther, root(ctx)+"/api-keys?notice=key_revoked")
}
