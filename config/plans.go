package config

import (
	"fmt"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Plan is a subscription plan: how long a paid period lasts and how long
// access outlives an unpaid renewal.
type Plan struct {
	// ID names the plan (subscriptions and order lines name it).
	ID string `yaml:"id"`
	// Months and Days make one period: calendar months, so that a monthly
	// plan renews on the same day of the month. At least one is set.
	Months int `yaml:"months"`
	Days   int `yaml:"days"`
	// Grace is how long access lasts past the end of a period whose
	// renewal is not paid (default 72h; 0s: none).
	Grace *time.Duration `yaml:"grace"`
}

// DefaultPlanGrace is a plan's grace when the configuration states none.
const DefaultPlanGrace = 72 * time.Hour

// MaxPlanGrace bounds a plan's grace.
const MaxPlanGrace = 90 * 24 * time.Hour

// Domain is the plan as the subscription rules take it.
func (p Plan) Domain() fulfillment.Plan {
	grace := DefaultPlanGrace
	if p.Grace != nil {
		grace = *p.Grace
	}
	return fulfillment.Plan{ID: p.ID, Period: fulfillment.Period{Months: p.Months, Days: p.Days}, Grace: grace}
}

// Plan returns the plan named id.
func (c *Config) Plan(id string) (fulfillment.Plan, bool) {
	for _, p := range c.Plans {
		if p.ID == id {
			return p.Domain(), true
		}
	}
	return fulfillment.Plan{}, false
}

// DomainPlans are the configured plans as the subscription rules take
// them, by id.
func (c *Config) DomainPlans() fulfillment.Plans {
	plans := make(fulfillment.Plans, len(c.Plans))
	for _, p := range c.Plans {
		plans[p.ID] = p.Domain()
	}
	return plans
}

func (c *Config) validatePlans() error {
	ids := map[string]bool{}
	for i, p := range c.Plans {
		key := fmt.Sprintf("plans[%d]", i)
		switch {
		case !fulfillment.ConfigIDPattern.MatchString(p.ID):
			return fmt.Errorf("%s.id: required; lowercase letters, digits, _ and -, at most 64 characters", key)
		case ids[p.ID]:
			return fmt.Errorf("%s.id: %q is used twice", key, p.ID)
		case p.Months < 0 || p.Months > 120 || p.Days < 0 || p.Days > 3660:
			return fmt.Errorf("%s: months from 0 to 120, days from 0 to 3660", key)
		case p.Months == 0 && p.Days == 0:
			return fmt.Errorf("%s: a period needs months or days (months: 1 for a monthly plan)", key)
		case p.Grace != nil && (*p.Grace < 0 || *p.Grace > MaxPlanGrace):
			return fmt.Errorf("%s.grace: from 0s to %s", key, MaxPlanGrace)
		}
		ids[p.ID] = true
	}
	return nil
}
