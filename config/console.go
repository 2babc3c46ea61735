package config

import (
	"errors"
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
}

// Console defaults and bounds.
const (
	DefaultConsoleSessionTTL = 12 * time.Hour
	MaxConsoleSessionTTL     = 7 * 24 * time.Hour
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
	return nil
}

// HasScope reports whether the token holds scope. Admin holds every scope
// but ingest: only a webhook gateway, which verified a provider's
// signature, may record provider events.
func (t Token) HasScope(scope string) bool {
	return slices.Contains(t.Scopes, scope) || (scope != ScopeIngest && slices.Contains(t.Scopes, ScopeAdmin))
}

// AllOrgsAllowed reports whether the token may act for every org.
func (t Token) AllOrgsAllowed() bool { return slices.Contains(t.Orgs, AllOrgs) }
