package fulfillment

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FeedCursor is a position in the order event feed: a reader holding it
// has read every event before it, and reads on from there.
type FeedCursor struct {
	// XID is the writing transaction's id, ID the event's: the feed is
	// ordered by both.
	XID uint64
	ID  int64
}

// String renders c for callers, who hand it back unchanged.
func (c FeedCursor) String() string {
	return strconv.FormatUint(c.XID, 10) + "." + strconv.FormatInt(c.ID, 10)
}

// Before reports whether c comes before d in the feed.
func (c FeedCursor) Before(d FeedCursor) bool {
	return c.XID < d.XID || c.XID == d.XID && c.ID < d.ID
}

// ParseFeedCursor reads a cursor String returned; "" is the start of the
// feed.
func ParseFeedCursor(field, s string) (FeedCursor, error) {
	if s == "" {
		return FeedCursor{}, nil
	}
	xid, id, ok := strings.Cut(s, ".")
	x, errX := strconv.ParseUint(xid, 10, 64)
	n, errN := strconv.ParseInt(id, 10, 64)
	if !ok || errX != nil || errN != nil || n < 0 {
		var vs violations
		vs.add(field, "must be a cursor the feed returned (or empty, for the start)")
		return FeedCursor{}, vs.err()
	}
	return FeedCursor{XID: x, ID: n}, nil
}

// OrderEvent is one order event of the feed: an order entered a state
// announced by Topic.
type OrderEvent struct {
	Cursor      FeedCursor
	OrgID       string
	Environment Environment
	// OrderID names the order of an order event, SubscriptionID the
	// subscription of a subscription event (subscription.renewed, …): one
	// of them is set.
	OrderID        string
	SubscriptionID string
	Topic          Topic
	// Payload is the event's JSON: the same value as the body of the outbox
	// messages announcing it (members may come in another order).
	Payload   []byte
	CreatedAt time.Time
}

// FeedParams selects a stretch of the feed.
type FeedParams struct {
	After FeedCursor
	// VisibleOrgs restricts the events to these orgs; nil means every org.
	VisibleOrgs []string
	OrgID       string
	Environment Environment
	Limit       int
}

// Matches reports whether e is an event p selects, its cursor aside: of a
// visible org, and of p's org and environment when they are set.
func (p FeedParams) Matches(e OrderEvent) bool {
	if p.VisibleOrgs != nil && !slices.Contains(p.VisibleOrgs, e.OrgID) {
		return false
	}
	return (p.OrgID == "" || p.OrgID == e.OrgID) && (p.Environment == "" || p.Environment == e.Environment)
}

// FeedStore keeps the order event feed.
type FeedStore interface {
	// FeedTail returns the cursor of the last event FeedRead can return
	// now (the zero cursor for an empty feed): every event after it is
	// read later.
	FeedTail(ctx context.Context) (FeedCursor, error)
	// FeedRead returns up to p.Limit events after p.After, in feed order.
	// An event it has not returned never appears before the last one it
	// did: a reader resuming from its cursor misses none.
	FeedRead(ctx context.Context, p FeedParams) ([]OrderEvent, error)
	// FeedListen calls wake whenever events may have been written, until
	// ctx ends. wake must not block.
	FeedListen(ctx context.Context, wake func())
}
