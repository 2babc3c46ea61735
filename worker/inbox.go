package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// NewInbox returns the inbox processor: the queue of stored provider events,
// each batch processed in one transaction by work. onOutcome, when not nil,
// observes every processed event (metrics).
func NewInbox(work fulfillment.InboxWork, owners Owners, cfg Config, log *slog.Logger, onOutcome func(fulfillment.Outcome)) *Queue {
	return NewQueue("inbox", inboxTable{work: work, log: log, onOutcome: onOutcome}, owners, cfg, log)
}

// inboxTable is the inbox as a Table.
type inboxTable struct {
	work      fulfillment.InboxWork
	log       *slog.Logger
	onOutcome func(fulfillment.Outcome)
}

func (t inboxTable) Claim(ctx context.Context, owner string, limit int, lease time.Duration, maxAttempts int, inFlight []int64) ([]Claim, error) {
	got, err := t.work.InboxClaim(ctx, owner, limit, lease, maxAttempts, inFlight)
	claims := make([]Claim, len(got))
	for i, c := range got {
		claims[i] = Claim{ID: c.ID, Attempts: c.Attempts}
	}
	return claims, err
}

func (t inboxTable) Process(ctx context.Context, owner string, claims []Claim) error {
	ids := make([]int64, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	outs, err := t.work.InboxProcess(ctx, ids, owner)
	if err != nil {
		return err
	}
	for _, c := range claims {
		out, ok := outs[c.ID]
		if !ok {
			t.log.Info("inbox event taken over by another worker", "inbox_id", c.ID)
			continue
		}
		if t.onOutcome != nil {
			t.onOutcome(out)
		}
	}
	return nil
}

func (t inboxTable) Retry(ctx context.Context, owner string, c Claim, cause string, next time.Time, maxAttempts int) (bool, error) {
	return t.work.InboxRetry(ctx, c.ID, owner, cause, next, maxAttempts)
}

func (t inboxTable) Release(ctx context.Context, owner string) (int, error) {
	return t.work.InboxRelease(ctx, owner)
}

func (t inboxTable) Reclaim(ctx context.Context) (int, error) { return t.work.InboxReclaim(ctx) }

func (t inboxTable) Listen(ctx context.Context, wake func()) error {
	return t.work.InboxListen(ctx, wake)
}
