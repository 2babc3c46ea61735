package chaos

// The outbox side of a run: two loopback receivers, in the harness process
// (which is never killed), stand for the services that fulfil external
// lines. One applies a repeated webhook-id once, the other applies every
// request it accepts; both misbehave now and then. After the run every
// delivery is counted at its receiver and compared with outbox_messages and
// the reconciliation items.

import (
	crand "crypto/rand"
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// The run's destinations.
const (
	// destIdempotent applies a repeated webhook-id once; it also subscribes
	// to order.fulfilled and to the subscription events.
	destIdempotent = "dest-idempotent"
	// destPlain applies every request it accepts: the outbox must never
	// send it a message twice.
	destPlain = "dest-plain"

	// destTimeout bounds one delivery attempt: short, so that kills,
	// database stops and the receivers' hangs end in real timeouts.
	destTimeout = time.Second
	// destAttempts is each message's retry budget.
	destAttempts = 30
	// destConcurrency is each destination's deliveries in flight.
	destConcurrency = 4
	// hangFor is how long a hanging receiver holds a request: past the
	// timeout.
	hangFor = 2 * destTimeout
	// maxWork bounds how long a receiver takes over a request it answers.
	maxWork = 60 * time.Millisecond
)

// receiverFaults are the chances that a receiver misbehaves with one
// request; what remains applies the effect and answers 200.
type receiverFaults struct {
	refuse     float64 // answers 500, without the effect
	hangBefore float64 // holds the request past the timeout, without the effect
	hangAfter  float64 // applies the effect, then holds the answer past the timeout
	drop       float64 // applies the effect, then resets the connection
}

// destination is one of the run's destinations and its receiver.
type destination struct {
	id         string
	idempotent bool
	secretEnv  string
	events     []string // the order events it subscribes to
	faults     receiverFaults
	secret     string
	rcv        *receiver.Receiver

	refused, hungBefore, hungAfter, dropped atomic.Int64
}

// newDestinations describes the run's two destinations. The idempotent one
// fails more often, as retrying it is safe; the other one rarely, as each
// failure of a request it may have processed is an open item.
func newDestinations() []*destination {
	return []*destination{
		{
			id: destIdempotent, idempotent: true, secretEnv: "CHAOS_DEST_IDEMPOTENT_SECRET",
			events: append([]string{string(fulfillment.TopicOrderFulfilled)}, subTopics...),
			faults: receiverFaults{refuse: 0.05, hangBefore: 0.01, hangAfter: 0.01, drop: 0.01},
		},
		{
			id: destPlain, secretEnv: "CHAOS_DEST_PLAIN_SECRET",
			faults: receiverFaults{refuse: 0.01, hangBefore: 0.005, hangAfter: 0.01, drop: 0.005},
		},
	}
}

// start starts the receiver, with a fresh signing secret.
func (d *destination) start(seed int64) error {
	key := make([]byte, 32)
	_, _ = crand.Read(key)
	d.secret = stdwebhooks.SecretPrefix + base64.StdEncoding.EncodeToString(key)
	secret, err := stdwebhooks.ParseSecret(d.secret)
	if err != nil {
		return err
	}
	d.rcv, err = receiver.New(receiver.Options{Secrets: []stdwebhooks.Secret{secret}, Idempotent: d.idempotent, Plan: d.plan(seed)})
	return err
}

// config is the destination in fulfillmentd's configuration.
func (d *destination) config() config.Destination {
	return config.Destination{
		ID: d.id, URL: d.rcv.URL() + "/fulfil", Idempotent: &d.idempotent,
		Secrets: []config.Secret{{Env: d.secretEnv}},
		Timeout: destTimeout, MaxAttempts: destAttempts, Concurrency: destConcurrency, Events: d.events,
	}
}

// plan draws each request's fate from the seed, the key and the request's
// number, and counts the faults. A request that is answered takes a while,
// as real work does: the effect half-way through.
func (d *destination) plan(seed int64) receiver.Plan {
	f := d.faults
	return func(key string, n int) receiver.Action {
		h := fnv.New64a()
		_, _ = fmt.Fprintf(h, "%d|%s|%s|%d", seed, d.id, key, n)
		// FNV's high bits barely depend on the last bytes: mix them in.
		rng := rand.New(rand.NewPCG(h.Sum64(), uint64(seed)))
		x, work := rng.Float64(), time.Duration(rng.Int64N(int64(maxWork)))
		switch {
		case x < f.refuse:
			d.refused.Add(1)
			return receiver.Action{Status: http.StatusInternalServerError, Before: work}
		case x < f.refuse+f.hangBefore:
			d.hungBefore.Add(1)
			return receiver.Action{Before: hangFor}
		case x < f.refuse+f.hangBefore+f.hangAfter:
			d.hungAfter.Add(1)
			return receiver.Action{Before: work / 2, After: hangFor}
		case x < f.refuse+f.hangBefore+f.hangAfter+f.drop:
			d.dropped.Add(1)
			return receiver.Action{Before: work / 2, After: work / 2, Drop: true}
		}
		return receiver.Action{Before: work / 2, After: work / 2}
	}
}

// quiesce waits (a few seconds at most) until the receivers handle no
// request: one abandoned by its sender may take a moment to notice.
func (r *runner) quiesce() {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		busy := 0
		for _, d := range r.dests {
			busy += d.rcv.InFlight()
		}
		if busy == 0 {
			return
		}
	}
}

// outboxRow is one stored outbox message.
type outboxRow struct {
	id       int64
	dest     string
	topic    string
	key      string
	orderID  string
	state    string
	attempts int
}

// msgKey indexes messages by destination and idempotency key.
func msgKey(dest, key string) string { return dest + "|" + key }

// wantState is the state of a paid order: fulfilled once the message of
// each of its external lines is delivered, fulfilling until then.
func wantState(s *dbState, o *orderPlan, orderID string) string {
	for _, l := range o.externalLines() {
		if s.messages[msgKey(l.dest, fulfillment.LineKey(orderID, l.no))].state != string(fulfillment.DeliveryDelivered) {
			return string(fulfillment.StateFulfilling)
		}
	}
	return string(fulfillment.StateFulfilled)
}

// checkOutbox counts, for every message the workload calls for, the
// effects at its receiver: a paid order's external lines, and
// order.fulfilled of each fulfilled order and the events of the
// subscriptions for the destination subscribed to them. A delivered message was applied exactly once; an uncertain one (to
// the destination that does not honour keys) or a failed one at most once,
// with one open item; nothing was sent for an unpaid order, and nothing
// else was sent at all.
func (r *runner) checkOutbox(s *dbState) {
	c := Check{Name: "outbox: each delivery applied once, each doubt an open item"}
	reps := map[string]*DestinationReport{}
	for _, d := range r.dests {
		reps[d.id] = &DestinationReport{ID: d.id, Idempotent: d.idempotent,
			Refused: d.refused.Load(), HungBefore: d.hungBefore.Load(), HungAfter: d.hungAfter.Load(), Dropped: d.dropped.Load()}
	}
	expected := map[string]bool{}
	one := func(d *destination, key, about string, due bool) {
		c.Checked++
		expected[msgKey(d.id, key)] = true
		m, stored := s.messages[msgKey(d.id, key)]
		effects := d.rcv.Effects(key)
		rep := reps[d.id]
		if !due {
			if stored || effects > 0 {
				c.Failed++
				r.viol.add("delivery without payment", "%s: %s has a %s message (%v) and %d effects at %s, but was never paid",
					about, key, m.state, stored, effects, d.id)
			}
			return
		}
		if !stored {
			c.Failed++
			r.viol.add("missing message", "%s: no message %s to %s (%d effects at the receiver)", about, key, d.id, effects)
			return
		}
		rep.Messages++
		n := d.rcv.Requests(key)
		rep.Requests += n
		if n > 1 {
			rep.Resent++
		}
		if effects > 1 {
			rep.Doubled++
		}
		items := s.msgItems[m.id]
		ok := effects <= 1
		switch fulfillment.DeliveryState(m.state) {
		case fulfillment.DeliveryDelivered:
			ok = ok && effects == 1 && len(items) == 0
			if effects == 1 {
				rep.Delivered++
			}
		case fulfillment.DeliveryUncertain:
			rep.Uncertain++
			rep.UncertainReached += effects
			ok = ok && !d.idempotent && r.oneOpenItem(items, itemUncertainDelivery)
		case fulfillment.DeliveryFailed:
			rep.Failed++
			ok = ok && r.oneOpenItem(items, itemFailedDelivery)
		default:
			ok = false // pending after the drain: reported there too
		}
		if !ok {
			c.Failed++
			r.viol.add("outbox delivery", "%s: message %d (%s to %s) is %s after %d attempts, with %d effects at the receiver and %d items %v",
				about, m.id, key, d.id, m.state, m.attempts, effects, len(items), items)
		}
	}
	idem := r.dest(destIdempotent)
	for _, o := range r.w.orders {
		row, ok := s.orders[o.mid]
		if !ok {
			continue // reported
		}
		paid := row.state == string(fulfillment.StateFulfilled) || row.state == string(fulfillment.StateFulfilling)
		for _, l := range o.externalLines() {
			one(r.dest(l.dest), fulfillment.LineKey(row.id, l.no), "order "+o.mid, paid)
		}
		// Due once the order was fulfilled, even if refunded since.
		one(idem, fulfillment.EventKey(row.id, fulfillment.TopicOrderFulfilled), "order "+o.mid,
			row.state == string(fulfillment.StateFulfilled) || r.fulfilledBefore[o.mid])
	}
	for _, m := range r.subMessages {
		one(r.dest(m.dest), m.key, m.about, true)
	}

	// Nothing else was queued, nor reached a receiver.
	for k, m := range s.messages {
		if !expected[k] {
			c.Failed++
			r.viol.add("unexpected message", "message %d (%s, %s to %s) is %s, but no order of the run calls for it", m.id, m.topic, m.key, m.dest, m.state)
		}
	}
	for _, d := range r.dests {
		for _, key := range d.rcv.Keys() {
			if !expected[msgKey(d.id, key)] {
				c.Failed++
				r.viol.add("unexpected effect", "%s applied %s, which no order of the run calls for", d.id, key)
			}
		}
		if n := d.rcv.Forged(); n > 0 {
			c.Failed++
			r.viol.add("forged delivery", "%s refused %d deliveries whose signature did not verify", d.id, n)
		}
		r.rep.Destinations = append(r.rep.Destinations, *reps[d.id])
	}
	r.addCheck(c)
}

// oneOpenItem reports whether items is exactly one open item of kind; an
// item beyond the first is a duplicated effect.
func (r *runner) oneOpenItem(items []itemRow, kind string) bool {
	r.rep.DuplicatedEffects += max(0, len(items)-1)
	ok := len(items) == 1 && items[0].kind == kind && items[0].state == "open"
	if !ok {
		r.rep.Unitemized++
	}
	return ok
}

// dest is the run's destination id.
func (r *runner) dest(id string) *destination {
	for _, d := range r.dests {
		if d.id == id {
			return d
		}
	}
	panic("chaos: no destination " + id)
}
