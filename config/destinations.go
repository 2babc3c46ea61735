// Destinations: the receivers of outbox deliveries, and the dispatcher's
// settings.

package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
)

// Destination is one receiver of outbox deliveries: the fulfillment requests
// of the external lines that name it, and the order events it subscribes to.
// Each delivery is an HTTP POST signed as a Standard Webhook.
type Destination struct {
	ID  string `yaml:"id"`
	URL string `yaml:"url"`
	// Secrets are the Standard Webhooks signing secrets (whsec_...): one
	// signature per secret, so that a receiver can rotate.
	Secrets []Secret `yaml:"secrets"`
	// Idempotent must be stated: true when the receiver applies a repeated
	// webhook-id / Idempotency-Key once. Only then is a delivery whose
	// outcome is unknown (a timeout, a reset, a 5xx) sent again.
	Idempotent *bool `yaml:"idempotent"`
	// Timeout bounds one attempt, connect to answer (default 10s).
	Timeout time.Duration `yaml:"timeout"`
	// MaxAttempts is the retry budget of one message (default 12).
	MaxAttempts int `yaml:"max_attempts"`
	// Concurrency caps the deliveries in flight to it (default 4).
	Concurrency int `yaml:"concurrency"`
	// Events are the order and subscription events it receives (fulfillment.EventTopics).
	Events []string `yaml:"events"`

	// Keys are the parsed secrets, resolved at load time. Never logged.
	Keys []stdwebhooks.Secret `yaml:"-"`
}

// Defaults and bounds of a destination.
const (
	DefaultDestinationTimeout     = 10 * time.Second
	MaxDestinationTimeout         = 2 * time.Minute
	DefaultDestinationAttempts    = 12
	MaxDestinationAttempts        = 100
	DefaultDestinationConcurrency = 4
	MaxDestinationConcurrency     = 64
)

// WithDefaults fills in the keys left out.
func (d Destination) WithDefaults() Destination {
	if d.Timeout == 0 {
		d.Timeout = DefaultDestinationTimeout
	}
	if d.MaxAttempts == 0 {
		d.MaxAttempts = DefaultDestinationAttempts
	}
	if d.Concurrency == 0 {
		d.Concurrency = DefaultDestinationConcurrency
	}
	return d
}

// Destination returns the configured destination with id.
func (c *Config) Destination(id string) (Destination, bool) {
	return FindDestination(c.Destinations, id)
}

// FindDestination returns the destination of ds with id.
func FindDestination(ds []Destination, id string) (Destination, bool) {
	for _, d := range ds {
		if d.ID == id {
			return d, true
		}
	}
	return Destination{}, false
}

func (c *Config) resolveDestinations(getenv func(string) string) error {
	for i := range c.Destinations {
		d := &c.Destinations[i]
		for j, sec := range d.Secrets {
			key := fmt.Sprintf("destinations[%d].secrets[%d]", i, j)
			if sec.Env == "" && sec.File == "" {
				return fmt.Errorf("%s: set env or file (secrets are never written in the file)", key)
			}
			v, err := secret(key, "", sec.Env, sec.File, getenv)
			if err != nil {
				return err
			}
			k, err := stdwebhooks.ParseSigningSecret(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			d.Keys = append(d.Keys, k)
		}
		*d = d.WithDefaults()
	}
	return nil
}

func (c *Config) validateDestinations() error {
	ids := map[string]bool{}
	for i, d := range c.Destinations {
		key := fmt.Sprintf("destinations[%d]", i)
		if !fulfillment.ConfigIDPattern.MatchString(d.ID) {
			return fmt.Errorf("%s.id: required; lowercase letters, digits, _ and -, at most 64 characters (external order lines name it)", key)
		}
		if ids[d.ID] {
			return fmt.Errorf("%s.id: %q is used twice", key, d.ID)
		}
		ids[d.ID] = true
		if err := checkDestinationURL(d.URL); err != nil {
			return fmt.Errorf("%s.url: %w", key, err)
		}
		switch {
		case len(d.Secrets) == 0:
			return fmt.Errorf("%s.secrets: at least one Standard Webhooks signing secret (whsec_...) is required", key)
		case d.Idempotent == nil:
			return fmt.Errorf("%s.idempotent: required: true when the receiver applies a repeated webhook-id once (then unclear failures are retried), false otherwise", key)
		case d.Timeout < 0 || d.Timeout > MaxDestinationTimeout:
			return fmt.Errorf("%s.timeout: from 1ms to %s", key, MaxDestinationTimeout)
		case d.MaxAttempts < 0 || d.MaxAttempts > MaxDestinationAttempts:
			return fmt.Errorf("%s.max_attempts: from 1 to %d", key, MaxDestinationAttempts)
		case d.Concurrency < 0 || d.Concurrency > MaxDestinationConcurrency:
			return fmt.Errorf("%s.concurrency: from 1 to %d", key, MaxDestinationConcurrency)
		}
		for j, e := range d.Events {
			if !slices.Contains(fulfillment.EventTopics, fulfillment.Topic(e)) {
				return fmt.Errorf("%s.events[%d]: %q is not one of %s", key, j, e, topicList())
			}
			if slices.Contains(d.Events[:j], e) {
				return fmt.Errorf("%s.events[%d]: %q is listed twice", key, j, e)
			}
		}
	}
	return c.Outbox.validate("outbox")
}

// ignoredQueueKeys are the warnings about the queue keys that the outbox and
// status_poll sections share with the other queues but that are set
// elsewhere: read there, they change nothing. They were accepted before they
// were named, so a file that sets them still loads (an upgrade must not stop
// a service for a key that never did anything), and serve and config check
// say so.
func (c *Config) ignoredQueueKeys() []string {
	var out []string
	if c.Outbox.Workers != 0 {
		out = append(out, "config: outbox.workers is ignored: set destinations[].concurrency (deliveries in flight to it, per process)")
	}
	if c.Outbox.MaxAttempts != 0 {
		out = append(out, "config: outbox.max_attempts is ignored: set destinations[].max_attempts")
	}
	if c.Outbox.Batch != 0 {
		out = append(out, "config: outbox.batch is ignored: a destination's workers claim a fixed number of messages at a time (one when it is not idempotent)")
	}
	if c.StatusPoll.Batch != 0 {
		out = append(out, "config: status_poll.batch is ignored: each claim takes one payment; status_poll.workers sets how many are asked about at once")
	}
	return out
}

// checkDestinationURL accepts an absolute http or https URL without
// credentials: the signature authenticates the service to the receiver.
func checkDestinationURL(raw string) error {
	if raw == "" {
		return errors.New("required: the http:// or https:// URL deliveries are posted to")
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return errors.New("not a valid URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("must start with http:// or https://")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("must name a host")
	case u.User != nil:
		return errors.New("must not hold credentials: receivers authenticate deliveries by their signature")
	case u.Fragment != "":
		return errors.New("must not have a #fragment")
	}
	return nil
}

func topicList() string {
	names := make([]string, len(fulfillment.EventTopics))
	for i, t := range fulfillment.EventTopics {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}
