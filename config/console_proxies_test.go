package config

import (
	"net/netip"
	"slices"
	"testing"
)

// An address is a network of one; a network is kept masked; a mapped IPv4
// address is its IPv4 address.
func TestProxyPrefixes(t *testing.T) {
	t.Parallel()
	c := Console{TrustedProxies: []string{"10.1.2.3/8", "192.0.2.7", "2001:db8::7", "::ffff:198.51.100.1"}}
	if err := c.validate(); err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.7/32"),
		netip.MustParsePrefix("2001:db8::7/128"), netip.MustParsePrefix("198.51.100.1/32")}
	if got := c.ProxyPrefixes(); !slices.Equal(got, want) {
		t.Errorf("prefixes %v, want %v", got, want)
	}
}
