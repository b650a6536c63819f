package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/netguard"
)

// publicAddrs are reachable under every policy.
var publicAddrs = []string{
	"8.8.8.8",
	"1.1.1.1",
	"93.184.216.34",
	"100.63.255.255",  // just below CGNAT
	"100.128.0.0",     // just above CGNAT
	"172.15.255.255",  // just below 172.16/12
	"172.32.0.0",      // just above 172.16/12
	"192.169.0.1",     // just above 192.168/16
	"11.0.0.1",        // just above 10/8
	"223.255.255.255", // just below multicast
	"2606:4700::1",
	"2001:4860:4860::8888",
	"::ffff:8.8.8.8", // IPv4-mapped public
}

// blockedAddrs are refused unless private networks are allowed.
var blockedAddrs = []string{
	// unspecified and "this" network
	"0.0.0.0", "0.1.2.3", "::",
	// loopback
	"127.0.0.1", "127.255.255.254", "::1",
	// RFC 1918
	"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255", "192.168.0.1", "192.168.255.255",
	// CGNAT
	"100.64.0.1", "100.127.255.255",
	// link-local, cloud metadata
	"169.254.0.1", "169.254.169.254", "fe80::1", "fe80::1%eth0", "febf::1",
	// multicast
	"224.0.0.1", "239.255.255.250", "ff02::1", "ff05::1:3",
	// reserved and broadcast
	"240.0.0.1", "255.255.255.255",
	// documentation, benchmarking, protocol assignments
	"192.0.0.1", "192.0.2.1", "198.18.0.1", "198.19.255.255", "198.51.100.1", "203.0.113.1", "2001:db8::1",
	// unique local
	"fc00::1", "fd12:3456:789a::1",
	// NAT64 and discard
	"64:ff9b::7f00:1", "100::1",
	// IPv4-mapped IPv6 carrying a blocked IPv4
	"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::ffff:169.254.169.254", "::ffff:192.168.1.1", "::ffff:0.0.0.0",
}

func TestCheckAddrBlocksReservedRanges(t *testing.T) {
	t.Parallel()

	var p netguard.Policy
	for _, s := range blockedAddrs {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			err := p.CheckAddr(netip.MustParseAddr(s))
			require.ErrorIs(t, err, netguard.ErrBlocked)
		})
	}
}

func TestCheckAddrAllowsPublic(t *testing.T) {
	t.Parallel()

	var p netguard.Policy
	for _, s := range publicAddrs {
		t.Run(s, func(t *testing.T) {
			t.Parallel()
			require.NoError(t, p.CheckAddr(netip.MustParseAddr(s)))
		})
	}
}

func TestCheckAddrAllowPrivateLetsEverythingThrough(t *testing.T) {
	t.Parallel()

	p := netguard.Policy{AllowPrivate: true}
	for _, s := range append(append([]string{}, blockedAddrs...), publicAddrs...) {
		require.NoError(t, p.CheckAddr(netip.MustParseAddr(s)), s)
	}
}

func TestCheckAddrRefusesInvalidAddress(t *testing.T) {
	t.Parallel()

	for _, p := range []netguard.Policy{{}, {AllowPrivate: true}} {
		require.ErrorIs(t, p.CheckAddr(netip.Addr{}), netguard.ErrBlocked)
	}
}

func TestCheckAddrAllowList(t *testing.T) {
	t.Parallel()

	// The second entry is not masked; NewPolicy masks it to fd00:1::/32.
	p, err := netguard.NewPolicy(false, []string{"10.1.0.0/16", " fd00:1:2::5/32 ", "127.0.0.1/32"})
	require.NoError(t, err)

	tests := []struct {
		addr    string
		allowed bool
	}{
		{"10.1.0.0", true},
		{"10.1.255.255", true},
		{"::ffff:10.1.2.3", true}, // mapped form judged as IPv4
		{"10.0.255.255", false},
		{"10.2.0.0", false},
		{"192.168.1.1", false},
		{"fd00:1:ffff::1", true},
		{"fd00:2::1", false},
		{"127.0.0.1", true},
		{"127.0.0.2", false},
		{"::1", false},
		{"8.8.8.8", true}, // public stays allowed
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			err := p.CheckAddr(netip.MustParseAddr(tt.addr))
			if tt.allowed {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, netguard.ErrBlocked)
			}
		})
	}
}

func TestNewPolicy(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		cidrs   []string
		want    []netip.Prefix
		wantErr string
	}{
		{name: "none", cidrs: nil, want: nil},
		{name: "masked", cidrs: []string{"10.1.2.3/16"}, want: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		{name: "trimmed", cidrs: []string{" 192.168.0.0/24\t"}, want: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/24")}},
		{name: "bare address", cidrs: []string{"10.0.0.1"}, wantErr: `allow cidr "10.0.0.1"`},
		{name: "bad mask", cidrs: []string{"10.0.0.0/8", "::/129"}, wantErr: `allow cidr "::/129"`},
		{name: "empty", cidrs: []string{""}, wantErr: `allow cidr ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := netguard.NewPolicy(true, tt.cidrs)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.True(t, p.AllowPrivate)
			require.Equal(t, tt.want, p.Allow)
		})
	}
}

// fakeResolver answers from a map and records the names it was asked for.
type fakeResolver struct {
	addrs map[string][]string
	err   error

	mu          sync.Mutex
	asked       []string
	hadDeadline bool
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, network+" "+host)
	_, f.hadDeadline = ctx.Deadline()
	if f.err != nil {
		return nil, f.err
	}
	out := make([]netip.Addr, 0, len(f.addrs[host]))
	for _, a := range f.addrs[host] {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

func (f *fakeResolver) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

func TestCheckHost(t *testing.T) {
	t.Parallel()

	names := map[string][]string{
		"internal.example":  {"127.0.0.1"},
		"metadata.example":  {"169.254.169.254"},
		"mixed.example":     {"93.184.216.34", "10.0.0.7"},
		"mapped.example":    {"::ffff:192.168.0.1"},
		"public.example":    {"93.184.216.34", "2606:4700::1"},
		"trailingdot.test":  {"10.0.0.1"},
		"nothing.example":   {},
		"allowlist.example": {"10.1.0.9"},
	}
	tests := []struct {
		name         string
		policy       netguard.Policy
		resolverErr  error
		host         string
		blocked      bool
		wantResolved []string // nil: the resolver must not be asked
	}{
		{name: "v4 loopback literal", host: "127.0.0.1", blocked: true},
		{name: "v4 private literal", host: "10.0.0.1", blocked: true},
		{name: "metadata literal", host: "169.254.169.254", blocked: true},
		{name: "v6 loopback bracketed", host: "[::1]", blocked: true},
		{name: "v6 loopback bare", host: "::1", blocked: true},
		{name: "v6 ula bracketed", host: "[fd00::1]", blocked: true},
		{name: "mapped literal", host: "[::ffff:127.0.0.1]", blocked: true},
		{name: "zoned link-local", host: "fe80::1%eth0", blocked: true},
		{name: "public v4 literal", host: "8.8.8.8"},
		{name: "public v6 literal", host: "[2606:4700::1]"},
		{name: "localhost", host: "localhost", blocked: true},
		{name: "localhost upper case", host: "LocalHost", blocked: true},
		{name: "localhost trailing dot", host: "localhost.", blocked: true},
		{name: "sub.localhost", host: "foo.localhost", blocked: true},
		{name: "deep sub.localhost", host: "a.b.LOCALHOST", blocked: true},
		{name: "resolves to loopback", host: "internal.example", blocked: true, wantResolved: []string{"ip internal.example"}},
		{name: "resolves to metadata", host: "metadata.example", blocked: true, wantResolved: []string{"ip metadata.example"}},
		{name: "one of several blocked", host: "mixed.example", blocked: true, wantResolved: []string{"ip mixed.example"}},
		{name: "resolves to mapped private", host: "mapped.example", blocked: true, wantResolved: []string{"ip mapped.example"}},
		{name: "trailing dot resolved without it", host: "trailingdot.test.", blocked: true, wantResolved: []string{"ip trailingdot.test"}},
		{name: "resolves to public", host: "public.example", wantResolved: []string{"ip public.example"}},
		{name: "resolves to nothing", host: "nothing.example", wantResolved: []string{"ip nothing.example"}},
		{name: "notlocalhost is a name", host: "notlocalhost", wantResolved: []string{"ip notlocalhost"}},
		{name: "resolver error is accepted", host: "not-yet.example", resolverErr: errors.New("no such host"), wantResolved: []string{"ip not-yet.example"}},
		{name: "allow private: loopback literal", policy: netguard.Policy{AllowPrivate: true}, host: "127.0.0.1"},
		{name: "allow private: localhost", policy: netguard.Policy{AllowPrivate: true}, host: "localhost"},
		{name: "allow private: name not resolved", policy: netguard.Policy{AllowPrivate: true}, host: "internal.example"},
		{name: "allow list: name", policy: netguard.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
			host: "allowlist.example", wantResolved: []string{"ip allowlist.example"}},
		{name: "allow list: literal", policy: netguard.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}, host: "10.1.2.3"},
		{name: "allow list: localhost still refused", policy: netguard.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
			host: "localhost", blocked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := &fakeResolver{addrs: names, err: tt.resolverErr}
			err := tt.policy.CheckHost(context.Background(), r, tt.host, time.Second)
			if tt.blocked {
				require.ErrorIs(t, err, netguard.ErrBlocked)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tt.wantResolved, r.calls())
			if tt.wantResolved != nil {
				r.mu.Lock()
				require.True(t, r.hadDeadline, "the lookup must run under the timeout")
				r.mu.Unlock()
			}
		})
	}
}

func TestCheckHostErrorNamesHostAndRange(t *testing.T) {
	t.Parallel()

	r := &fakeResolver{addrs: map[string][]string{"rebind.example": {"10.9.8.7"}}}
	err := netguard.Policy{}.CheckHost(context.Background(), r, "rebind.example", time.Second)
	require.ErrorIs(t, err, netguard.ErrBlocked)
	require.ErrorContains(t, err, "rebind.example")
	require.ErrorContains(t, err, "10.9.8.7")
	require.ErrorContains(t, err, "10.0.0.0/8")
}

func TestCheckHostNilResolverUsesDefault(t *testing.T) {
	t.Parallel()

	// An IP literal and a localhost name are judged without any resolver,
	// so a nil resolver must not matter for them.
	var p netguard.Policy
	require.ErrorIs(t, p.CheckHost(context.Background(), nil, "127.0.0.1", time.Second), netguard.ErrBlocked)
	require.ErrorIs(t, p.CheckHost(context.Background(), nil, "localhost", time.Second), netguard.ErrBlocked)
	// A name falls back to the system resolver instead of panicking; an
	// ".invalid" name never resolves (RFC 6761), which is accepted.
	require.NoError(t, p.CheckHost(context.Background(), nil, "hookline-test.invalid", time.Second))
}

func TestControlDirect(t *testing.T) {
	t.Parallel()

	tests := []struct {
		address string
		policy  netguard.Policy
		blocked bool
	}{
		{"127.0.0.1:80", netguard.Policy{}, true},
		{"[::1]:443", netguard.Policy{}, true},
		{"[::ffff:127.0.0.1]:443", netguard.Policy{}, true},
		{"[fe80::1%eth0]:80", netguard.Policy{}, true},
		{"169.254.169.254:80", netguard.Policy{}, true},
		{"93.184.216.34:443", netguard.Policy{}, false},
		{"[2606:4700::1]:443", netguard.Policy{}, false},
		{"127.0.0.1:80", netguard.Policy{AllowPrivate: true}, false},
		{"not-an-address", netguard.Policy{AllowPrivate: true}, true},
		{"example.com:443", netguard.Policy{}, true}, // Control sees resolved addresses only
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			t.Parallel()
			err := tt.policy.Control()("tcp", tt.address, nil)
			if tt.blocked {
				require.ErrorIs(t, err, netguard.ErrBlocked)
			} else {
				require.NoError(t, err)
			}
		})
	}
}

func TestControlWithRealDialer(t *testing.T) {
	t.Parallel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	// Accept and close connections so that successful dials complete.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); <-done })

	_, port, err := net.SplitHostPort(ln.Addr().String())
	require.NoError(t, err)

	tests := []struct {
		name    string
		policy  netguard.Policy
		address string
		blocked bool
	}{
		{"private refused", netguard.Policy{}, ln.Addr().String(), true},
		{"localhost name refused after resolution", netguard.Policy{}, net.JoinHostPort("localhost", port), true},
		{"private allowed", netguard.Policy{AllowPrivate: true}, ln.Addr().String(), false},
		{"allow list covers loopback", netguard.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, ln.Addr().String(), false},
		{"allow list elsewhere", netguard.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}, ln.Addr().String(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			d := net.Dialer{Control: tt.policy.Control()}
			conn, err := d.DialContext(ctx, "tcp", tt.address)
			if tt.blocked {
				require.ErrorIs(t, err, netguard.ErrBlocked)
				require.Nil(t, conn)
				return
			}
			require.NoError(t, err)
			require.NoError(t, conn.Close())
		})
	}
}

func TestCheckAddrBlocksIPv4CompatibleForms(t *testing.T) {
	t.Parallel()
	for _, a := range []string{"::", "::1", "::127.0.0.1", "::10.0.0.1", "::8.8.8.8"} {
		require.ErrorIs(t, netguard.Policy{}.CheckAddr(netip.MustParseAddr(a)), netguard.ErrBlocked, a)
	}
}

// TestCheckAddrBlocksEmbeddingAndProviderRanges covers ranges that carry an
// IPv4 address inside an IPv6 one (a translator or tunnel relay could hand
// the connection to the private address it embeds) and the Azure host
// address, which answers metadata and DHCP requests from any VM.
func TestCheckAddrBlocksEmbeddingAndProviderRanges(t *testing.T) {
	t.Parallel()

	tests := []struct {
		addr    string
		blocked bool
	}{
		// local-use NAT64, RFC 8215
		{"64:ff9b:1::a00:1", true},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff", true},
		{"64:ff9b:2::1", false},
		// 6to4, RFC 3056: 2002:AABB:CCDD::/48 embeds AA.BB.CC.DD
		{"2002:7f00:1::1", true},    // 127.0.0.1
		{"2002:a9fe:a9fe::1", true}, // 169.254.169.254
		{"2002:808:808::1", true},   // even a public IPv4: relays are untrusted
		{"2003::1", false},
		// Teredo, RFC 4380
		{"2001::1", true},
		{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", true},
		{"2001:200::1", false},
		// deprecated site-local, RFC 3879
		{"fec0::1", true},
		{"feff:ffff::1", true},
		// IPv4-translated, RFC 2765 (SIIT): ::ffff:0:a.b.c.d
		{"::ffff:0:7f00:1", true},
		{"::ffff:0:a9fe:a9fe", true},
		{"::ffff:0:808:808", true},
		// Azure host (wireserver, IMDS proxy, DNS)
		{"168.63.129.16", true},
		{"::ffff:168.63.129.16", true},
		{"168.63.129.15", false},
		{"168.63.129.17", false},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			err := netguard.Policy{}.CheckAddr(netip.MustParseAddr(tt.addr))
			if tt.blocked {
				require.ErrorIs(t, err, netguard.ErrBlocked)
			} else {
				require.NoError(t, err)
			}
		})
	}
}
