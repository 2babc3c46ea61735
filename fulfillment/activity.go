package fulfillment

import (
	"time"
)

// Bounds of an activity window (GetActivity).
const (
	DefaultActivityMinutes = 60
	MaxActivityMinutes     = 180
)

// ActivityKind names what an activity count counts.
type ActivityKind string

// Activity kinds.
const (
	// ActivityEventsReceived: provider events stored (a webhook delivered
	// again is not stored again).
	ActivityEventsReceived ActivityKind = "events_received"
	// ActivityOrdersFulfilled: orders that reached StateFulfilled.
	ActivityOrdersFulfilled ActivityKind = "orders_fulfilled"
	// ActivityMessagesDelivered: outbox messages a destination accepted.
	ActivityMessagesDelivered ActivityKind = "messages_delivered"
)

// ActivityCount is how many things of Kind happened in the minute that
// starts at Minute.
type ActivityCount struct {
	Minute time.Time
	Kind   ActivityKind
	N      int64
}

// ActivityMinute is one minute of a window, every kind counted.
type ActivityMinute struct {
	Start                                              time.Time
	EventsReceived, OrdersFulfilled, MessagesDelivered int64
}

// ActivityWindow is the start of a window of minutes whole minutes before
// the one now is in, and that one: minutes+1 minutes in all. minutes
// outside 1..MaxActivityMinutes is a violation; 0 is the default.
func ActivityWindow(now time.Time, minutes int) (start time.Time, n int, err error) {
	if minutes == 0 {
		minutes = DefaultActivityMinutes
	}
	if minutes < 1 || minutes > MaxActivityMinutes {
		var vs violations
		vs.add("minutes", "must be between 1 and %d (0 for %d)", MaxActivityMinutes, DefaultActivityMinutes)
		return time.Time{}, 0, vs.err()
	}
	cur := now.UTC().Truncate(time.Minute)
	return cur.Add(-time.Duration(minutes) * time.Minute), minutes + 1, nil
}

// ActivityMinutes spreads counts over the n minutes from start, oldest
// first, every minute present (zero when nothing happened in it). Counts
// outside the window, or of unknown kinds, are left out.
func ActivityMinutes(start time.Time, n int, counts []ActivityCount) []ActivityMinute {
	out := make([]ActivityMinute, n)
	for i := range out {
		out[i].Start = start.Add(time.Duration(i) * time.Minute)
	}
	for _, c := range counts {
		d := c.Minute.Sub(start)
		if d < 0 {
			continue
		}
		i := int(d / time.Minute)
		if i >= n {
			continue
		}
		switch c.Kind {
		case ActivityEventsReceived:
			out[i].EventsReceived += c.N
		case ActivityOrdersFulfilled:
			out[i].OrdersFulfilled += c.N
		case ActivityMessagesDelivered:
			out[i].MessagesDelivered += c.N
		}
	}
	return out
}
