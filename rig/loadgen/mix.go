package loadgen

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what a request of a Mix sends.
type Kind int

const (
	// KindNew is the first delivery of an order's payment.confirmed.
	KindNew Kind = iota
	// KindRedelivery resends the exact bytes of an event already acknowledged.
	KindRedelivery
	// KindOutOfOrder is a new stale event (Source.Stale) for an order whose
	// confirmation was already acknowledged: it must not move the order
	// back.
	KindOutOfOrder
	numKinds
)

// maxRedeliveryPool bounds the acknowledged events kept for redelivery.
const maxRedeliveryPool = 1 << 16

// Mix generates a provider-like webhook stream of Source's events over a
// pool of orders: mostly first deliveries of a payment confirmation (one per
// order), a share of redeliveries of events already acknowledged (chosen at
// random, resent byte for byte), and a share of out-of-order (stale) events
// arriving after the order's confirmation. It is safe for concurrent use.
type Mix struct {
	Source     Source
	Redeliver  float64 // share of requests that are redeliveries, e.g. 0.2
	OutOfOrder float64 // share of requests that are out-of-order events, e.g. 0.05
	// StopWhenExhausted makes Send return ErrStop once every order's
	// confirmation has been sent, instead of sending redeliveries: the run
	// ends early but its mix stays what was asked for.
	StopWhenExhausted bool

	orders    []Order
	next      atomic.Int64
	exhausted atomic.Int64
	// exhaustedNow is set by the Next call that found no order left.
	exhaustedNow atomic.Bool
	acked        [numKinds]atomic.Int64

	mu        sync.Mutex
	pool      []Event // acknowledged events, for redelivery (a ring once full)
	poolNext  int     // next ring slot to overwrite
	confirmed []Event // acknowledged confirmations (a ring once full)
	confNext  int
	acks      []Ack // new events (KindNew, KindOutOfOrder) answered 200 while measured
}

// Ack is a new event that was answered 200 while measured.
type Ack struct {
	ID              string
	MerchantOrderID string
	Kind            Kind
	// At is when its answer was read: the provider knows from then on
	// that the event is safe.
	At time.Time
}

// NewMix returns a mix of src's events over orders; each order's
// confirmation is sent once as a new event.
func NewMix(src Source, orders []Order, redeliver, outOfOrder float64) *Mix {
	return &Mix{Source: src, Redeliver: redeliver, OutOfOrder: outOfOrder, orders: orders}
}

// Next picks the next event to send. Once every order's confirmation has
// been sent it falls back to redeliveries (counted by Exhausted), or with
// StopWhenExhausted reports ok = false.
// A call that drew an order always returns it, even when another call
// found none left meanwhile: its confirmation is one of every order's.
func (m *Mix) Next() (ev Event, k Kind, ok bool) {
	ev, k, drawn := m.next1()
	if m.StopWhenExhausted && !drawn && m.exhaustedNow.Load() {
		return Event{}, k, false
	}
	return ev, k, true
}

// next1 picks the next event; drawn says it is the confirmation of an
// order drawn from the list.
func (m *Mix) next1() (Event, Kind, bool) {
	r := rand.Float64()
	if r < m.Redeliver {
		if ev, ok := m.pick(); ok {
			return ev, KindRedelivery, false
		}
	} else if r < m.Redeliver+m.OutOfOrder {
		if ev, ok := m.pickConfirmed(); ok {
			return m.Source.Stale(ev), KindOutOfOrder, false
		}
	}
	i := m.next.Add(1) - 1
	if int(i) < len(m.orders) {
		return m.Source.Confirmed(m.orders[i].MerchantOrderID), KindNew, true
	}
	m.exhausted.Add(1)
	m.exhaustedNow.Store(true)
	if ev, ok := m.pick(); ok {
		return ev, KindRedelivery, false
	}
	// Nothing acknowledged yet and no order left: a confirmation for an
	// unknown order (recorded as unmatched).
	return m.Source.Confirmed("unknown-order"), KindNew, false
}

func (m *Mix) pick() (Event, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pool) == 0 {
		return Event{}, false
	}
	return m.pool[rand.IntN(len(m.pool))], true
}

func (m *Mix) pickConfirmed() (Event, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.confirmed) == 0 {
		return Event{}, false
	}
	return m.confirmed[rand.IntN(len(m.confirmed))], true
}

// Done records the answer to ev, read just now: acknowledged events become
// candidates for redelivery; when measured, new acknowledged events are
// listed in Acks and NewIDs.
func (m *Mix) Done(ev Event, k Kind, status int, measured bool) {
	if status != http.StatusOK {
		return
	}
	at := time.Now()
	m.acked[k].Add(1)
	if k == KindRedelivery {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pool) < maxRedeliveryPool {
		m.pool = append(m.pool, ev)
	} else {
		m.pool[m.poolNext] = ev
		m.poolNext = (m.poolNext + 1) % maxRedeliveryPool
	}
	if k == KindNew {
		if len(m.confirmed) < maxRedeliveryPool {
			m.confirmed = append(m.confirmed, ev)
		} else {
			m.confirmed[m.confNext] = ev
			m.confNext = (m.confNext + 1) % maxRedeliveryPool
		}
	}
	if measured {
		m.acks = append(m.acks, Ack{ID: ev.ID, MerchantOrderID: ev.MerchantOrderID, Kind: k, At: at})
	}
}

// Send sends the next event with s and records the answer.
func (m *Mix) Send(ctx context.Context, s *Sender, measured bool) (int, error) {
	ev, k, ok := m.Next()
	if !ok {
		return 0, ErrStop
	}
	status, err := s.Send(ctx, ev)
	if err == nil {
		m.Done(ev, k, status, measured)
	}
	return status, err
}

// NewIDs returns the ids of the new events acknowledged while measured.
func (m *Mix) NewIDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, len(m.acks))
	for i, a := range m.acks {
		ids[i] = a.ID
	}
	return ids
}

// Acks returns the new events acknowledged while measured, in the order
// their answers were recorded.
func (m *Mix) Acks() []Ack {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.acks)
}

// Acked returns how many requests of kind k were answered 200.
func (m *Mix) Acked(k Kind) int { return int(m.acked[k].Load()) }

// Exhausted counts requests that wanted a new order when none was left.
func (m *Mix) Exhausted() int { return int(m.exhausted.Load()) }
