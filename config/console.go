package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Console configures the admin console served at /console/ on the HTTP
// listener. Operators sign in with a configured API token (auth.tokens) and
// act with exactly its scopes and orgs.
type Console struct {
	// Enabled serves the console (default true).
	Enabled *bool `yaml:"enabled,omitempty"`
	// SessionTTL is how long a sign-in lasts (default 12h, at most 7 days).
	SessionTTL time.Duration `yaml:"session_ttl,omitempty"`
	// TrustedProxies are the addresses (192.0.2.7, 2001:db8::7) and
	// networks (10.0.0.0/8) of the reverse proxies in front of the
	// console. A request from one of them is counted, for the sign-in
	// limit, as the client its X-Forwarded-For names (the nearest address
	// that is not a trusted proxy); any other request as its own peer,
	// whatever headers it sends. Empty (the default): no header is
	// trusted.
	TrustedProxies []string `yaml:"trusted_proxies,omitempty"`
}

// Console defaults and bounds.
const (
	DefaultConsoleSessionTTL = 12 * time.Hour
	MaxConsoleSessionTTL     = 7 * 24 * time.Hour
	// MaxTrustedProxies bounds console.trusted_proxies.
	MaxTrustedProxies = 64
)

// WithDefaults fills the keys left out.
func (c Console) WithDefaults() Console {
	if c.Enabled == nil {
		on := true
		c.Enabled = &on
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultConsoleSessionTTL
	}
	return c
}

// On reports whether the console is served.
func (c Console) On() bool { return c.Enabled == nil || *c.Enabled }

func (c Console) validate() error {
	if c.SessionTTL < 0 || c.SessionTTL > MaxConsoleSessionTTL {
		return errors.New("console.session_ttl: between 1s and 168h (0: the default, 12h)")
	}
	if c.SessionTTL != 0 && c.SessionTTL < time.Second {
		return errors.New("console.session_ttl: between 1s and 168h (0: the default, 12h)")
	}
	if len(c.TrustedProxies) > MaxTrustedProxies {
		return fmt.Errorf("console.trusted_proxies: %d entries, at most %d (name networks: 10.0.0.0/8)", len(c.TrustedProxies), MaxTrustedProxies)
	}
	for i, p := range c.TrustedProxies {
		if _, err := parseProxy(p); err != nil {
			return fmt.Errorf("console.trusted_proxies[%d]: %q is neither an address (192.0.2.7) nor a network (10.0.0.0/8)", i, p)
		}
	}
	return nil
}

// ProxyPrefixes are TrustedProxies as networks, an address as a network of
// one; entries that do not parse (validate refuses them) are left out.
func (c Console) ProxyPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range c.TrustedProxies {
		if n, err := parseProxy(p); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func parseProxy(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return p, err
	}
	return p.Masked(), nil
}

// HasScope reports whether the token holds scope. Admin holds every scope
// but ingest: only a webhook gateway, which verified a provider's
// signature, may record provider events.
func (t Token) HasScope(scope string) bool {
	return slices.Contains(t.Scopes, scope) || (scope != ScopeIngest && slices.Contains(t.Scopes, ScopeAdmin))
}

// AllOrgsAllowed reports whether the token may act for every org.
func (t Token) AllOrgsAllowed() bool { return slices.Contains(t.Orgs, AllOrgs) }
