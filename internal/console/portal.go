package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/tenant"
)

// The portal (docs/PORTAL.md) is the console's pages for a tenant's own
// customer, who holds no hookline key: a platform's backend asks for a
// one-time link (POST /v1/tenants/{id}/portal-sessions), the customer's
// browser opens it, usually inside a frame of the platform's product, and
// gets a short session limited to the tenant's endpoints, deliveries,
// retries, recoveries and health.
const (
	portalRoot   = "/portal"
	portalCookie = "hookline_portal"
	// PortalLinkTTL is how long a portal link may wait to be opened.
	PortalLinkTTL = 5 * time.Minute
	// PortalSessionTTL is how long a portal session lasts once its link
	// is opened.
	PortalSessionTTL = time.Hour
	// actionPortalOpened is the audit action of a portal link being used.
	actionPortalOpened = "portal.session_started"
)

// PortalLink is a one-time link into a tenant's portal: Path (with its
// token) is relative to the api's public address.
type PortalLink struct {
	SessionID uuid.UUID
	Path      string
	ExpiresAt time.Time
}

// portalLiveSQL holds for a portal session s (a link or a session) while
// what it rests on holds: the tenant's portal is on, and the service key
// that opened it (none when the admin did) is neither revoked nor expired.
// Revoking a key or turning the portal off also ends its sessions for good
// (ended_at); expiry needs no writer, this check sees it.
const portalLiveSQL = `EXISTS (SELECT 1 FROM tenants t WHERE t.id = s.tenant_id AND coalesce((t.portal->>'enabled')::boolean, true))
  AND (s.created_by_service_key IS NULL OR EXISTS (SELECT 1 FROM service_keys k WHERE k.id = s.created_by_service_key
      AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())))`

const (
	openPortalSQL = `INSERT INTO portal_sessions (id, tenant_id, token_hash, created_by_service_key, link_expires_at, expires_at)
SELECT $1, t.id, $3, $4, now() + $5 * interval '1 millisecond', now() + $5 * interval '1 millisecond'
FROM tenants t WHERE t.id = $2 AND coalesce((t.portal->>'enabled')::boolean, true)
RETURNING link_expires_at`
	tenantExistsSQL = `SELECT EXISTS (SELECT 1 FROM tenants WHERE id = $1)`
	// usePortalSQL spends a link: once, before it expires. The session
	// lasts from then.
	usePortalSQL = `UPDATE portal_sessions s SET used_at = now(), expires_at = now() + $2 * interval '1 millisecond'
WHERE token_hash = $1 AND used_at IS NULL AND ended_at IS NULL AND link_expires_at > now() AND ` + portalLiveSQL + `
RETURNING id, tenant_id, created_by_service_key, expires_at`
	portalActiveSQL = `SELECT created_by_service_key FROM portal_sessions s
WHERE id = $1 AND tenant_id = $2 AND used_at IS NOT NULL AND ended_at IS NULL AND expires_at > now() AND ` + portalLiveSQL
	endPortalSQL = `UPDATE portal_sessions SET ended_at = now() WHERE id = $1 AND tenant_id = $2 AND ended_at IS NULL`
	// linkTenantSQL finds the tenant of a link, spent or not, for the
	// frame policy of the page that says it cannot be used.
	linkTenantSQL = `SELECT tenant_id FROM portal_sessions WHERE token_hash = $1`
)

// ErrPortalDisabled means the tenant's portal is turned off.
var ErrPortalDisabled = errors.New("the tenant's portal is turned off")

// OpenPortalSession creates a one-time link into the portal of tenantID,
// opened by the service key by (nil: the admin). tenant.ErrNotFound when
// there is no such tenant, ErrPortalDisabled when its portal is off.
func (c *Console) OpenPortalSession(ctx context.Context, tenantID uuid.UUID, by *uuid.UUID) (PortalLink, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return PortalLink{}, fmt.Errorf("portal token: %w", err)
	}
	token := base64.RawURLEncoding.EncodeToString(raw[:])
	hash := sha256.Sum256([]byte(token))
	l := PortalLink{SessionID: uuid.Must(uuid.NewV7()), Path: portalRoot + "/start?token=" + token}
	err := c.db.QueryRow(ctx, openPortalSQL, l.SessionID, tenantID, hash[:], by, PortalLinkTTL.Milliseconds()).Scan(&l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := c.db.QueryRow(ctx, tenantExistsSQL, tenantID).Scan(&exists); err != nil {
			return PortalLink{}, fmt.Errorf("open portal session: %w", err)
		}
		if exists {
			return PortalLink{}, ErrPortalDisabled
		}
		return PortalLink{}, tenant.ErrNotFound
	}
	if err != nil {
		return PortalLink{}, fmt.Errorf("open portal session: %w", err)
	}
	l.ExpiresAt = l.ExpiresAt.UTC()
	return l, nil
}

// RegisterPortal mounts the portal's routes on g (the /portal group).
func (c *Console) RegisterPortal(g *gin.RouterGroup) {
	g.Use(securityHeaders)
	g.GET("/static/console.css", serveStylesheet)
	g.GET("/start", c.startPortal)
	s := g.Group("", c.requirePortal)
	s.GET("/static/theme.css", c.serveTheme)
	s.POST("/sign-out", c.endPortal)
	c.registerPages(s, false)
}

// startPortal spends a portal link and starts the session in this
// browser.
func (c *Console) startPortal(ctx *gin.Context) {
	token := ctx.Query("token")
	hash := sha256.Sum256([]byte(token))
	s := Session{Portal: true, nonce: randomNonce()}
	err := c.db.QueryRow(ctx.Request.Context(), usePortalSQL, hash[:], PortalSessionTTL.Milliseconds()).
		Scan(&s.KeyID, &s.TenantID, &s.OpenedBy, &s.Expires)
	if errors.Is(err, pgx.ErrNoRows) || token == "" {
		var tenantID uuid.UUID
		if c.db.QueryRow(ctx.Request.Context(), linkTenantSQL, hash[:]).Scan(&tenantID) == nil {
			c.framePolicyOf(ctx, tenantID)
		}
		c.renderError(ctx, http.StatusUnauthorized, "This link has expired or was already used. Open the portal again from the page that showed it.")
		return
	}
	if err != nil {
		c.fail(ctx, fmt.Errorf("start portal session: %w", err))
		return
	}
	t, err := c.tenants.Get(ctx.Request.Context(), s.TenantID)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	framePolicy(ctx, t.Portal)
	cookie, err := c.encodeSession(ctx.Request.Context(), s)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	c.setPortalCookie(ctx, cookie, int(time.Until(s.Expires).Seconds()))
	actx := audit.WithActor(ctx.Request.Context(), portalActor(ctx, s))
	if err := c.auditLog.Record(actx, s.TenantID, actionPortalOpened, "portal_session", s.KeyID.String(), nil); err != nil {
		c.log.Error("audit record failed", "action", actionPortalOpened, "error", err)
	}
	ctx.Redirect(http.StatusSeeOther, portalRoot+"/webhooks")
}

// setPortalCookie sets the portal's session cookie so that it works inside
// a frame on the platform's own site: SameSite=None (sent on requests from
// the frame), Secure (which that requires; browsers treat
// http://localhost as secure) and Partitioned (kept per embedding site,
// which browsers that block third-party cookies still allow).
func (c *Console) setPortalCookie(ctx *gin.Context, value string, maxAge int) {
	// SameSite=None is what framing needs; every form of the portal carries
	// the session's CSRF token, which a request from another site lacks.
	http.SetCookie(ctx.Writer, &http.Cookie{Name: portalCookie, Value: value, Path: portalRoot, MaxAge: maxAge, //nolint:gosec // see above
		Secure: true, HttpOnly: true, SameSite: http.SameSiteNoneMode, Partitioned: true})
}

// requirePortal lets through requests with a live portal session, and
// form posts only with its CSRF token.
func (c *Console) requirePortal(ctx *gin.Context) {
	s, err := c.portalSession(ctx)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	if s == nil {
		// A session that ended still names its tenant, in a cookie only
		// hookline can have signed: the page saying so shows in its frame.
		if v, err := ctx.Cookie(portalCookie); err == nil {
			if ended, err := c.decodeSession(ctx.Request.Context(), v, true); err == nil {
				c.framePolicyOf(ctx, ended.TenantID)
			}
		}
		c.renderError(ctx, http.StatusUnauthorized, "Your session has ended. Open the portal again from the page that showed it.")
		return
	}
	framePolicy(ctx, s.Theme)
	c.admit(ctx, *s, portalActor(ctx, *s))
}

// portalSession returns the request's portal session, nil when there is
// none or it ended.
func (c *Console) portalSession(ctx *gin.Context) (*Session, error) {
	v, err := ctx.Cookie(portalCookie)
	if err != nil || v == "" {
		return nil, nil
	}
	s, err := c.decodeSession(ctx.Request.Context(), v, true)
	if errors.Is(err, errBadSession) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	err = c.db.QueryRow(ctx.Request.Context(), portalActiveSQL, s.KeyID, s.TenantID).Scan(&s.OpenedBy)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("portal session: %w", err)
	}
	t, err := c.tenants.Get(ctx.Request.Context(), s.TenantID)
	if errors.Is(err, tenant.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.TenantName, s.Theme, s.PublishLimit = t.Name, t.Portal, t.PublishRateLimit
	if s.Theme.Name != "" {
		s.TenantName = s.Theme.Name
	}
	return &s, nil
}

// portalActor is who acts in a portal session, for the audit log.
func portalActor(ctx *gin.Context, s Session) audit.Actor {
	return audit.Actor{Type: audit.ActorPortal, ServiceKeyID: s.OpenedBy, RemoteAddr: ctx.RemoteIP()}
}

// framePolicy lets the tenant's configured origins frame the portal, and
// lets its pages show the tenant's logo.
func framePolicy(ctx *gin.Context, p tenant.Portal) {
	ancestors := "'none'"
	if len(p.FrameOrigins) > 0 {
		ancestors = "'self' " + strings.Join(p.FrameOrigins, " ")
	}
	img := "'self' data:"
	if u, err := url.Parse(p.LogoURL); err == nil && p.LogoURL != "" {
		img += " " + u.Scheme + "://" + u.Host
	}
	h := ctx.Writer.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src "+img+
		"; form-action 'self'; frame-ancestors "+ancestors+"; base-uri 'none'")
	h.Del("X-Frame-Options")
}

// framePolicyOf applies the frame policy of tenantID to an answer given
// without a session; the default (no framing) stays when the tenant
// cannot be read.
func (c *Console) framePolicyOf(ctx *gin.Context, tenantID uuid.UUID) {
	if t, err := c.tenants.Get(ctx.Request.Context(), tenantID); err == nil {
		framePolicy(ctx, t.Portal)
	}
}

// serveTheme is the stylesheet of the tenant's accent colour.
func (c *Console) serveTheme(ctx *gin.Context) {
	css := ""
	if a := session(ctx).Theme.AccentColor; accentPattern(a) {
		css = fmt.Sprintf(":root { --accent: %s; }\n", a)
	}
	ctx.Header("Cache-Control", "no-store")
	ctx.Data(http.StatusOK, "text/css; charset=utf-8", []byte(css))
}

// accentPattern re-checks a stored colour before it goes into CSS.
func accentPattern(a string) bool {
	if len(a) != 7 || a[0] != '#' {
		return false
	}
	for _, r := range a[1:] {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return false
		}
	}
	return true
}

// endPortal ends the portal session for good and forgets it here.
func (c *Console) endPortal(ctx *gin.Context) {
	s := session(ctx)
	if _, err := c.db.Exec(ctx.Request.Context(), endPortalSQL, s.KeyID, s.TenantID); err != nil {
		c.fail(ctx, fmt.Errorf("end portal session: %w", err))
		return
	}
	c.setPortalCookie(ctx, "", -1)
	c.renderError(ctx, http.StatusOK, "You have signed out. Open the portal again from the page that showed it.")
}
