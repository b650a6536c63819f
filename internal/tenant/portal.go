package tenant

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/hookline/hookline/internal/fielderr"
)

// Portal is whether a tenant's portal may be opened, how it looks and
// where it may be embedded (docs/PORTAL.md): the name and logo its
// customers see, the accent colour of its buttons and links, and the
// origins whose pages may frame it.
type Portal struct {
	// Enabled lets portal links be made and used (default true); turning
	// it off ends the tenant's portal links and sessions.
	Enabled     bool   `json:"enabled"`
	Name        string `json:"name"`
	LogoURL     string `json:"logo_url"`
	AccentColor string `json:"accent_color"`
	// FrameOrigins are the origins (scheme://host[:port]) allowed to show
	// the portal in a frame; empty: none, the portal opens only on its own.
	FrameOrigins []string `json:"frame_origins"`
}

// UnmarshalJSON reads settings stored or sent: enabled left out is true,
// as for the settings stored before it existed.
func (p *Portal) UnmarshalJSON(b []byte) error {
	type fields Portal
	v := fields{Enabled: true}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*p = Portal(v)
	return nil
}

// PortalInput changes a tenant's portal settings; nil fields are kept.
type PortalInput struct {
	Enabled      *bool     `json:"enabled"`
	Name         *string   `json:"name"`
	LogoURL      *string   `json:"logo_url"`
	AccentColor  *string   `json:"accent_color"`
	FrameOrigins *[]string `json:"frame_origins"`
}

const maxFrameOrigins = 20

var accentColor = regexp.MustCompile(`^#[0-9a-fA-F]{6}$`)

// apply sets the given fields of in on p and validates the result.
func (in *PortalInput) apply(p Portal) (Portal, error) {
	if in == nil {
		return p, nil
	}
	if in.Enabled != nil {
		p.Enabled = *in.Enabled
	}
	if in.Name != nil {
		p.Name = strings.TrimSpace(*in.Name)
	}
	if in.LogoURL != nil {
		p.LogoURL = strings.TrimSpace(*in.LogoURL)
	}
	if in.AccentColor != nil {
		p.AccentColor = strings.TrimSpace(*in.AccentColor)
	}
	if in.FrameOrigins != nil {
		p.FrameOrigins = []string{}
		for i, o := range *in.FrameOrigins {
			norm, err := frameOrigin(o)
			if err != nil {
				return Portal{}, fielderr.New(fmt.Sprintf("portal.frame_origins[%d]", i), "%s", err.Error())
			}
			p.FrameOrigins = append(p.FrameOrigins, norm)
		}
	}
	if len(p.Name) > maxNameLen {
		return Portal{}, fielderr.New("portal.name", "must be at most %d characters", maxNameLen)
	}
	if err := fielderr.Text("portal.name", p.Name); err != nil {
		return Portal{}, err
	}
	if p.LogoURL != "" {
		u, err := url.Parse(p.LogoURL)
		if err != nil || u.Scheme != "https" || !plainHost(u) || u.User != nil || len(p.LogoURL) > 2048 ||
			strings.ContainsAny(p.LogoURL, " \"'<>;,") {
			return Portal{}, fielderr.New("portal.logo_url", "must be an https URL of at most 2048 characters")
		}
	}
	if p.AccentColor != "" && !accentColor.MatchString(p.AccentColor) {
		return Portal{}, fielderr.New("portal.accent_color", "must be a colour written #rrggbb")
	}
	if len(p.FrameOrigins) > maxFrameOrigins {
		return Portal{}, fielderr.New("portal.frame_origins", "must list at most %d origins", maxFrameOrigins)
	}
	return p, nil
}

// hostName is what a host may be in a portal setting: a DNS name or an
// IPv4 address, nothing that could end a Content-Security-Policy source.
var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

// plainHost reports whether u's host is a plain name with an optional
// numeric port, so that scheme://host[:port] is a safe CSP source.
func plainHost(u *url.URL) bool {
	if !hostName.MatchString(u.Hostname()) {
		return false
	}
	if port := u.Port(); port != "" {
		n, err := strconv.Atoi(port)
		return err == nil && n > 0 && n < 65536 && u.Host == u.Hostname()+":"+port
	}
	return u.Host == u.Hostname()
}

// frameOrigin checks and normalises an origin allowed to frame the portal:
// http or https, a host, an optional port, nothing else.
func frameOrigin(o string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(o))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || !plainHost(u) || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("must be an origin such as https://app.example.com (scheme, host, optional port)")
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}
