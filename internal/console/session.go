package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/tenant"
)

const (
	sessionCookie = "hookline_console"
	// signInCookie holds a random nonce between the sign-in page and its
	// form post, so that the sign-in form has a CSRF token too.
	signInCookie = "hookline_console_signin"
	consoleRoot  = "/console"
	cookiePath   = consoleRoot
	sessionCtx   = "console_session"
	// maxFormBytes bounds every form post.
	maxFormBytes = 64 << 10
	// actionSignedIn is the audit action of a console sign-in.
	actionSignedIn = "console.signed_in"
)

// Session is who is signed in: a tenant API key in the console, or a
// portal session in the portal, checked again on every request.
type Session struct {
	TenantID   uuid.UUID
	TenantName string
	// KeyID is the API key of a console session, the portal session's id
	// in the portal.
	KeyID     uuid.UUID
	KeyName   string
	KeyPrefix string
	Expires   time.Time
	// Portal marks a portal session; OpenedBy is the service key that
	// opened it (nil: the admin), and Theme the tenant's portal settings.
	Portal   bool
	OpenedBy *uuid.UUID
	Theme    tenant.Portal
	// PublishLimit is the tenant's, which test events, retries and
	// replays take from.
	PublishLimit config.PublishRateLimit
	nonce        [16]byte
	// signKey is the key that signed the session's cookie, which signs
	// its CSRF tokens too.
	signKey []byte
}

// Root is the path the session's pages live under.
func (s Session) Root() string {
	if s.Portal {
		return portalRoot
	}
	return consoleRoot
}

// Can says what the session may see and do beyond the pages both share:
// the portal shows a tenant's customer its endpoints, deliveries, retries,
// recoveries and health, never the tenant's API keys, audit log or breaker
// overrides.
func (s Session) Can() Capabilities {
	return Capabilities{Operator: !s.Portal}
}

// Capabilities are what a session may do; the templates and the routes
// both follow them.
type Capabilities struct {
	// Operator: API keys, the audit log, breaker overrides.
	Operator bool
}

// root is the path the request's pages live under.
func root(ctx *gin.Context) string {
	if v, ok := ctx.Get(sessionCtx); ok {
		return v.(Session).Root()
	}
	if strings.HasPrefix(ctx.Request.URL.Path, portalRoot+"/") {
		return portalRoot
	}
	return consoleRoot
}

// sessionLen is the length of a session cookie's payload: version (3 for
// the console, 4 for the portal), the id of the signing key, key or portal
// session id, tenant id, expiry (unix seconds), nonce. Versions 1 and 2
// were signed with the key derived from the admin token; they are refused
// like any cookie that does not verify.
const sessionLen = 1 + 4 + 16 + 16 + 8 + 16

func mac(key []byte, label string, data []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(data)
	return m.Sum(nil)
}

// encodeSession signs s with the current signing key and returns its
// cookie value: payload and MAC, base64.
func (c *Console) encodeSession(ctx context.Context, s Session) (string, error) {
	id, key, err := c.keys.current(ctx, c.now())
	if err != nil {
		return "", err
	}
	b := make([]byte, 0, sessionLen+sha256.Size)
	b = append(b, sessionVersion(s.Portal))
	b = binary.BigEndian.AppendUint32(b, id)
	b = append(b, s.KeyID[:]...)
	b = append(b, s.TenantID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(s.Expires.Unix())) //nolint:gosec // expiry times are after 1970
	b = append(b, s.nonce[:]...)
	b = append(b, mac(key, "session", b)...)
	return base64.RawURLEncoding.EncodeToString(b), nil
}

var errBadSession = errors.New("invalid session")

func sessionVersion(portal bool) byte {
	if portal {
		return 4
	}
	return 3
}

// decodeSession checks the MAC and expiry of a cookie value, and that it
// is a portal session's cookie when portal is set and a console session's
// otherwise: errBadSession when it is not a live session's cookie.
func (c *Console) decodeSession(ctx context.Context, v string, portal bool) (Session, error) {
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) != sessionLen+sha256.Size || b[0] != sessionVersion(portal) {
		return Session{}, errBadSession
	}
	payload, sum := b[:sessionLen], b[sessionLen:]
	key, ok, err := c.keys.get(ctx, binary.BigEndian.Uint32(payload[1:5]), c.now())
	if err != nil {
		return Session{}, err
	}
	if !ok || !hmac.Equal(sum, mac(key, "session", payload)) {
		return Session{}, errBadSession
	}
	s := Session{Portal: portal, signKey: key}
	copy(s.KeyID[:], payload[5:21])
	copy(s.TenantID[:], payload[21:37])
	s.Expires = time.Unix(int64(binary.BigEndian.Uint64(payload[37:45])), 0) //nolint:gosec // written by us from a positive Unix time and authenticated
	copy(s.nonce[:], payload[45:61])
	if !c.now().Before(s.Expires) {
		return Session{}, errBadSession
	}
	return s, nil
}

// csrfToken is the token every form of session s carries.
func (c *Console) csrfToken(s Session) string {
	return base64.RawURLEncoding.EncodeToString(mac(s.signKey, "csrf", s.nonce[:]))
}

// validCSRF reports whether token is the CSRF token of session s.
func (c *Console) validCSRF(token string, s Session) bool {
	return hmac.Equal([]byte(token), []byte(c.csrfToken(s)))
}

// signInToken is the token of the sign-in form of a browser holding
// nonce: the id of the current signing key and a MAC under it.
func (c *Console) signInToken(ctx context.Context, nonce []byte) (string, error) {
	id, key, err := c.keys.current(ctx, c.now())
	if err != nil {
		return "", err
	}
	b := binary.BigEndian.AppendUint32(nil, id)
	return base64.RawURLEncoding.EncodeToString(append(b, mac(key, "sign-in", nonce)...)), nil
}

// validSignInToken reports whether token is a sign-in form's token for
// nonce, under any stored signing key.
func (c *Console) validSignInToken(ctx context.Context, token string, nonce []byte) (bool, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) != 4+sha256.Size {
		return false, nil
	}
	key, ok, err := c.keys.get(ctx, binary.BigEndian.Uint32(b[:4]), c.now())
	if err != nil || !ok {
		return false, err
	}
	return hmac.Equal(b[4:], mac(key, "sign-in", nonce)), nil
}

// secure reports whether cookies set in answer to r must be Secure.
func (c *Console) secure(r *http.Request) bool {
	return c.cfg.SecureCookies || r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func (c *Console) setCookie(ctx *gin.Context, name, value string, maxAge int) {
	// Secure whenever the request came over TLS or the operator says so;
	// a plain-HTTP console on localhost must still be able to sign in.
	http.SetCookie(ctx.Writer, &http.Cookie{ //nolint:gosec // Secure is set by c.secure above
		Name: name, Value: value, Path: cookiePath, MaxAge: maxAge,
		Secure: c.secure(ctx.Request), HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

// keyActive asks the tenant store whether the session's key still works,
// and returns it. ListKeys pages by id, so listing one key after the id
// just below the session's finds exactly that key.
func (c *Console) keyActive(ctx *gin.Context, s Session) (tenant.Key, bool, error) {
	prev := s.KeyID
	for i := len(prev) - 1; i >= 0; i-- {
		if prev[i] > 0 {
			prev[i]--
			break
		}
		prev[i] = 0xff
	}
	keys, err := c.tenants.ListKeys(ctx.Request.Context(), s.TenantID, &prev, 1)
	if err != nil || len(keys) == 0 || keys[0].ID != s.KeyID {
		return tenant.Key{}, false, err
	}
	k := keys[0]
	if k.RevokedAt != nil || (k.ExpiresAt != nil && !c.now().Before(*k.ExpiresAt)) {
		return tenant.Key{}, false, nil
	}
	return k, true, nil
}

// requireSession lets through requests with a valid session on a key that
// still works, and form posts only with that session's CSRF token. Without
// a session it sends the browser to the sign-in page.
func (c *Console) requireSession(ctx *gin.Context) {
	s, err := c.sessionOf(ctx)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	if s == nil {
		q := url.Values{}
		if v, err := ctx.Cookie(sessionCookie); err == nil && v != "" {
			q.Set("ended", "1")
			c.setCookie(ctx, sessionCookie, "", -1)
		}
		if ctx.Request.Method == http.MethodGet {
			q.Set("next", ctx.Request.URL.RequestURI())
		}
		to := "/console/sign-in"
		if len(q) > 0 {
			to += "?" + q.Encode()
		}
		ctx.Redirect(http.StatusSeeOther, to)
		ctx.Abort()
		return
	}
	c.admit(ctx, *s, audit.Actor{Type: audit.ActorAPIKey, KeyID: &s.KeyID, RemoteAddr: ctx.RemoteIP()})
}

// admit lets a request of session s through, a form post only with the
// session's CSRF token, and puts the session and who acts (a) into the
// request.
func (c *Console) admit(ctx *gin.Context, s Session, a audit.Actor) {
	if ctx.Request.Method == http.MethodPost {
		ctx.Request.Body = http.MaxBytesReader(ctx.Writer, ctx.Request.Body, maxFormBytes)
		if !c.validCSRF(ctx.PostForm("csrf"), s) {
			c.renderError(ctx, http.StatusForbidden, "This form was not sent by your session (or it has expired). Reload the page and try again.")
			return
		}
	}
	ctx.Set(sessionCtx, s)
	ctx.Request = ctx.Request.WithContext(audit.WithActor(ctx.Request.Context(), a))
	ctx.Next()
}

// sessionOf returns the request's session, nil when there is none or its
// key stopped working.
func (c *Console) sessionOf(ctx *gin.Context) (*Session, error) {
	v, err := ctx.Cookie(sessionCookie)
	if err != nil || v == "" {
		return nil, nil
	}
	s, err := c.decodeSession(ctx.Request.Context(), v, false)
	if errors.Is(err, errBadSession) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if ended, err := c.sessionEnded(ctx, s); err != nil || ended {
		return nil, err
	}
	k, ok, err := c.keyActive(ctx, s)
	if err != nil || !ok {
		return nil, err
	}
	t, err := c.tenants.Get(ctx.Request.Context(), s.TenantID)
	if errors.Is(err, tenant.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.TenantName, s.KeyName, s.KeyPrefix, s.PublishLimit = t.Name, k.Name, k.Prefix, t.PublishRateLimit
	return &s, nil
}

func session(ctx *gin.Context) Session { return ctx.MustGet(sessionCtx).(Session) }

func randomNonce() [16]byte {
	var n [16]byte
	if _, err := rand.Read(n[:]); err != nil {
		panic("crypto/rand failed: " + err.Error())
	}
	return n
}

// signInNonce returns the nonce of the sign-in cookie, setting a new one
// when the browser has none.
func (c *Console) signInNonce(ctx *gin.Context) []byte {
	if v, err := ctx.Cookie(signInCookie); err == nil {
		if b, err := base64.RawURLEncoding.DecodeString(v); err == nil && len(b) == 16 {
			return b
		}
	}
	n := randomNonce()
	c.setCookie(ctx, signInCookie, base64.RawURLEncoding.EncodeToString(n[:]), 3600)
	return n[:]
}

type signInData struct {
	base
	Next string
}

// safeNext keeps a post-sign-in destination only if it is a console page.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/console/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/console/webhooks"
	}
	return next
}

func (c *Console) signInPage(ctx *gin.Context) {
	nonce := c.signInNonce(ctx)
	d := signInData{Next: safeNext(ctx.Query("next"))}
	token, err := c.signInToken(ctx.Request.Context(), nonce)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	d.CSRF = token
	d.Title = "Sign in"
	if ctx.Query("ended") != "" {
		d.Notice = "Your session ended. Sign in again."
	}
	c.render(ctx, http.StatusOK, "signin", &d)
}

// signIn checks the API key of the sign-in form and starts a session.
func (c *Console) signIn(ctx *gin.Context) {
	ctx.Request.Body = http.MaxBytesReader(ctx.Writer, ctx.Request.Body, maxFormBytes)
	d := signInData{Next: safeNext(ctx.PostForm("next"))}
	d.Title = "Sign in"
	v, err := ctx.Cookie(signInCookie)
	nonce, derr := base64.RawURLEncoding.DecodeString(v)
	valid := false
	if err == nil && derr == nil && len(nonce) == 16 {
		if valid, err = c.validSignInToken(ctx.Request.Context(), ctx.PostForm("csrf"), nonce); err != nil {
			c.fail(ctx, err)
			return
		}
	}
	if !valid {
		c.renderError(ctx, http.StatusForbidden, "The sign-in form expired or did not come from this console. Reload the sign-in page and try again.")
		return
	}
	d.CSRF = ctx.PostForm("csrf")
	p, err := c.auth.Authenticate(ctx.Request.Context(), strings.TrimSpace(ctx.PostForm("api_key")))
	if errors.Is(err, tenant.ErrUnauthorized) {
		d.Error = "That API key is not valid: it may be mistyped, revoked or expired."
		c.render(ctx, http.StatusUnauthorized, "signin", &d)
		return
	}
	if err != nil {
		c.fail(ctx, err)
		return
	}
	s := Session{TenantID: p.TenantID, KeyID: p.KeyID, Expires: c.now().Add(c.cfg.SessionTTL), nonce: randomNonce()}
	if p.ExpiresAt != nil && p.ExpiresAt.Before(s.Expires) {
		s.Expires = *p.ExpiresAt
	}
	cookie, err := c.encodeSession(ctx.Request.Context(), s)
	if err != nil {
		c.fail(ctx, err)
		return
	}
	c.setCookie(ctx, sessionCookie, cookie, int(time.Until(s.Expires).Seconds()))
	c.setCookie(ctx, signInCookie, "", -1)
	actx := audit.WithActor(ctx.Request.Context(), audit.Actor{Type: audit.ActorAPIKey, KeyID: &p.KeyID, RemoteAddr: ctx.RemoteIP()})
	if err := c.auditLog.Record(actx, p.TenantID, actionSignedIn, "api_key", p.KeyID.String(), map[string]any{"via": "console"}); err != nil {
		c.log.Error("audit record failed", "action", actionSignedIn, "error", err)
	}
	ctx.Redirect(http.StatusSeeOther, d.Next)
}

// Sign-out is recorded in Postgres (migration 000003), so that every api
// process refuses the session's cookie afterwards, not only this browser
// (which forgets it). Rows are keyed by a hash of the session's nonce.
const (
	sessionEndedSQL = `SELECT EXISTS (SELECT 1 FROM console_sessions_ended WHERE session_hash = $1)`
	endSessionSQL   = `SELECT end_console_session($1, $2, $3)`
)

func sessionHash(s Session) []byte {
	h := sha256.Sum256(s.nonce[:])
	return h[:]
}

// sessionEnded reports whether s was signed out.
func (c *Console) sessionEnded(ctx *gin.Context, s Session) (bool, error) {
	var ended bool
	if err := c.db.QueryRow(ctx.Request.Context(), sessionEndedSQL, sessionHash(s)).Scan(&ended); err != nil {
		return false, fmt.Errorf("console session: %w", err)
	}
	return ended, nil
}

// signOut ends the session on the server and forgets it in this browser.
func (c *Console) signOut(ctx *gin.Context) {
	s := session(ctx)
	if _, err := c.db.Exec(ctx.Request.Context(), endSessionSQL, sessionHash(s), s.TenantID, s.Expires); err != nil {
		c.fail(ctx, fmt.Errorf("end console session: %w", err))
		return
	}
	c.setCookie(ctx, sessionCookie, "", -1)
	ctx.Redirect(http.StatusSeeOther, "/console/sign-in")
}
