package worker

import (
	"context"
	"time"
)

// Hand-off. The writer of new items (the inbox's group commit) may lease
// them, as it inserts them, to the live owner of a queue running in its
// own process, and hand them to the queue's workers once its transaction
// has committed: those items are never claimed. A hand-off saves each item
// its claim (a statement, an update of its row and of the claim index, a
// commit) and the wait for a wake-up.
//
// A handed item is an ordinary claim: counted as an attempt, in flight
// while a worker holds it, retried, released on shutdown, and reclaimed by
// the other replicas when its owner dies before it completed. The writer
// reserves room first (Reserve), so that no more items are leased than the
// workers will take soon — Workers × Batch waiting at most; the rest are
// inserted unleased and claimed as usual — and then says what it leased
// (Deliver), if anything.

// Handoff is a reservation of room in a queue for new items: the writer
// leases at most N of them to Owner for Lease.
type Handoff struct {
	Owner string // "" when the queue takes none (N is then 0)
	N     int
	Lease time.Duration
}

// Reserve reserves room for at most n items handed to the queue. The
// reservation must be ended by Deliver, with the items leased under it.
func (q *Queue) Reserve(n int) Handoff {
	owner, _ := q.owners.Owner()
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.running || owner == "" {
		return Handoff{}
	}
	n = min(n, q.cfg.Workers*q.cfg.Batch-q.reserved-q.handedLen())
	if n <= 0 {
		return Handoff{}
	}
	q.reserved += n
	return Handoff{Owner: owner, N: n, Lease: q.cfg.Lease}
}

// Deliver ends reservation h: claims (at most h.N) are the items the
// writer leased under it, in a transaction that committed. The queue's
// workers take them in batches. Items leased to an owner that is no
// longer live are left to the reclaims of the others; those leased to a
// queue that stopped meanwhile are released.
func (q *Queue) Deliver(h Handoff, claims []Claim) {
	if h.N == 0 {
		return
	}
	owner, _ := q.owners.Owner()
	q.mu.Lock()
	q.reserved -= h.N
	running := q.running
	if len(claims) > 0 && running && owner == h.Owner {
		q.handed = append(q.handed, handedClaims{owner: h.Owner, claims: claims})
		for _, c := range claims {
			q.inFlight[c.ID] = struct{}{}
		}
	}
	q.mu.Unlock()
	switch {
	case len(claims) == 0:
	case running:
		q.wakeOne()
	case owner == h.Owner:
		// Run ended after the reservation: hand the items back as Run
		// did with its own.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := q.table.Release(ctx, owner); err != nil {
			q.log.Warn("releasing items handed to a stopped queue", "error", err)
		}
	}
}

// handedClaims are items handed to the queue under one owner.
type handedClaims struct {
	owner  string
	claims []Claim
}

// takeHanded takes a batch of the items handed to owner, and drops those
// handed to another (a lost owner: reclaimed by others). It wakes another
// worker when more are waiting.
func (q *Queue) takeHanded(owner string) []Claim {
	q.mu.Lock()
	defer q.mu.Unlock()
	var batch []Claim
	for len(q.handed) > 0 && len(batch) < q.cfg.Batch {
		h := &q.handed[0]
		if h.owner != owner {
			for _, c := range h.claims {
				delete(q.inFlight, c.ID)
			}
			q.handed = q.handed[1:]
			continue
		}
		n := min(len(h.claims), q.cfg.Batch-len(batch))
		batch = append(batch, h.claims[:n]...)
		if h.claims = h.claims[n:]; len(h.claims) == 0 {
			q.handed = q.handed[1:]
		}
	}
	if len(q.handed) > 0 {
		q.wakeOne()
	}
	return batch
}

// handedLen is the number of items handed to the queue and not yet taken.
func (q *Queue) handedLen() int {
	n := 0
	for _, h := range q.handed {
		n += len(h.claims)
	}
	return n
}
