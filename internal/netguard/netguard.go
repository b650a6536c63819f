// Package netguard decides which network addresses webhook deliveries may
// reach. It is the SSRF defence: registration checks URLs with it, and the
// delivery dialer checks every resolved address with it at connect time, so
// that a name which resolves to a private address later (DNS rebinding) is
// still refused.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrBlocked is returned for an address that deliveries must not reach.
var ErrBlocked = errors.New("address is not allowed")

// blockedRanges are refused unless private networks are allowed or an allow
// list entry covers the address.
var blockedRanges = mustPrefixes(
	"0.0.0.0/8",        // "this" network, unspecified
	"10.0.0.0/8",       // RFC 1918
	"100.64.0.0/10",    // CGNAT, RFC 6598
	"127.0.0.0/8",      // loopback
	"168.63.129.16/32", // Azure host: wireserver, metadata proxy and DNS for every VM
	"169.254.0.0/16",   // link-local, cloud metadata (169.254.169.254)
	"172.16.0.0/12",    // RFC 1918
	"192.0.0.0/24",     // IETF protocol assignments
	"192.0.2.0/24",     // TEST-NET-1
	"192.168.0.0/16",   // RFC 1918
	"198.18.0.0/15",    // benchmarking
	"198.51.100.0/24",  // TEST-NET-2
	"203.0.113.0/24",   // TEST-NET-3
	"224.0.0.0/4",      // multicast
	"240.0.0.0/4",      // reserved, broadcast
	"::/96",            // unspecified, loopback and IPv4-compatible (::a.b.c.d)
	"::ffff:0:0:0/96",  // IPv4-translated (SIIT, RFC 2765): ::ffff:0:a.b.c.d
	"64:ff9b::/96",     // NAT64 (embeds IPv4)
	"64:ff9b:1::/48",   // local-use NAT64 (RFC 8215), embeds IPv4
	"100::/64",         // discard
	"2001::/32",        // Teredo: a relay reaches the IPv4 address it embeds
	"2001:db8::/32",    // documentation
	"2002::/16",        // 6to4: a relay reaches the IPv4 address it embeds
	"fc00::/7",         // unique local (ULA)
	"fe80::/10",        // link-local
	"fec0::/10",        // site-local (deprecated by RFC 3879, still routed inside some sites)
	"ff00::/8",         // multicast
)

func mustPrefixes(cidrs ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(cidrs))
	for i, c := range cidrs {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

// Policy says which addresses are allowed.
type Policy struct {
	// AllowPrivate lets every address through (development and tests).
	AllowPrivate bool
	// Allow lists ranges permitted even when AllowPrivate is false.
	Allow []netip.Prefix
}

// NewPolicy builds a Policy from configuration values.
func NewPolicy(allowPrivate bool, allowCIDRs []string) (Policy, error) {
	p := Policy{AllowPrivate: allowPrivate}
	for _, c := range allowCIDRs {
		prefix, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return Policy{}, fmt.Errorf("allow cidr %q: %w", c, err)
		}
		p.Allow = append(p.Allow, prefix.Masked())
	}
	return p, nil
}

// CheckAddr reports ErrBlocked when addr may not be reached. IPv4-mapped IPv6
// addresses (::ffff:127.0.0.1) are judged as the IPv4 address they carry.
func (p Policy) CheckAddr(addr netip.Addr) error {
	if !addr.IsValid() {
		return fmt.Errorf("%w: invalid address", ErrBlocked)
	}
	addr = addr.Unmap().WithZone("")
	if p.AllowPrivate {
		return nil
	}
	for _, allow := range p.Allow {
		if allow.Contains(addr) {
			return nil
		}
	}
	for _, r := range blockedRanges {
		if r.Contains(addr) {
			return fmt.Errorf("%w: %s is in the reserved range %s", ErrBlocked, addr, r)
		}
	}
	return nil
}

// Resolver looks host names up; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckHost judges a URL host at registration time. An IP literal or a
// localhost name is judged directly. A name is resolved (within timeout) and
// refused if any of its addresses is blocked; a name that does not resolve
// yet is accepted, because the dial-time check refuses it later if it ever
// resolves to a blocked address. A nil r means net.DefaultResolver.
func (p Policy) CheckHost(ctx context.Context, r Resolver, host string, timeout time.Duration) error {
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if addr, err := netip.ParseAddr(host); err == nil {
		return p.CheckAddr(addr)
	}
	if p.AllowPrivate {
		return nil
	}
	lower := strings.ToLower(host)
	if lower == "localhost" || strings.HasSuffix(lower, ".localhost") {
		return fmt.Errorf("%w: %s is a loopback name", ErrBlocked, host)
	}
	if r == nil {
		r = net.DefaultResolver
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := p.CheckAddr(a); err != nil {
			return fmt.Errorf("%s resolves to a blocked address: %w", host, err)
		}
	}
	return nil
}

// Control returns a net.Dialer Control function that refuses blocked
// addresses at connect time, after name resolution. Every connection attempt
// of the delivery client goes through it.
func (p Policy) Control() func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse %q", ErrBlocked, address)
		}
		return p.CheckAddr(ap.Addr())
	}
}

// compile-time check that the standard resolver fits.
var _ Resolver = (*net.Resolver)(nil)
