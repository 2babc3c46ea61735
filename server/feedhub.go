package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// feedHub is the one reader of the order event feed's tail in this process:
// while any stream follows the feed, it reads each new stretch once, for
// every org, and hands it to every stream, which keeps what its caller may
// see. Idle streams cost the database nothing each; the hub reads when a
// commit wakes it, and after feedPoll otherwise.
//
// A stream joins in two steps (see WatchOrderEvents): it subscribes, then
// reads the feed by itself from its cursor until a read comes back short;
// from then on it takes the hub's batches, skipping what it has already
// sent. Nothing falls between the two: the hub hands out only events after
// the tail it saw when the stream subscribed, and the stream's own last
// read, later than that, returned every event up to there (the feed's
// readable stretch only ever grows at its end). A stream whose buffer is
// full when a batch comes is dropped by the hub and catches up by itself
// again, so that a slow caller never holds the others back.
type feedHub struct {
	store fulfillment.FeedStore
	log   *slog.Logger
	poll  time.Duration

	mu      sync.Mutex
	subs    map[*feedSub]struct{}
	running bool          // the reading goroutine runs
	ready   chan struct{} // closed once it knows the tail it starts from
}

// feedSub is one stream's subscription. batches is closed when the hub
// drops it: the stream has missed a batch (its buffer was full, or the hub
// could not read) and must catch up by itself.
type feedSub struct {
	batches chan []fulfillment.OrderEvent
}

// feedSubBuffer is how many batches a stream may be behind the hub.
const feedSubBuffer = 16

func newFeedHub(store fulfillment.FeedStore, log *slog.Logger) *feedHub {
	return &feedHub{store: store, log: log, poll: feedPoll, subs: map[*feedSub]struct{}{}}
}

// subscribe adds a stream, starting the hub's reader when it is the first.
func (h *feedHub) subscribe() *feedSub {
	sub := &feedSub{batches: make(chan []fulfillment.OrderEvent, feedSubBuffer)}
	h.mu.Lock()
	h.subs[sub] = struct{}{}
	if !h.running {
		h.running = true
		h.ready = make(chan struct{})
		go h.run(h.ready)
	}
	ready := h.ready
	h.mu.Unlock()
	// The stream reads by itself only once the reader knows its tail.
	<-ready
	return sub
}

// unsubscribe removes a stream; the reader stops with the last one.
func (h *feedHub) unsubscribe(sub *feedSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[sub]; ok {
		delete(h.subs, sub)
		close(sub.batches)
	}
}

// run reads the feed's tail while there are subscribers. ready is closed
// once it knows the tail it starts from (or failed to learn it: the
// subscribers are then dropped, and catch up by themselves).
func (h *feedHub) run(ready chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	go h.store.FeedListen(ctx, func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	params := fulfillment.FeedParams{Limit: feedBatch}
	var err error
	readCtx, cancelRead := context.WithTimeout(ctx, 5*time.Second)
	params.After, err = h.store.FeedTail(readCtx)
	cancelRead()
	if err != nil {
		h.log.Warn("order event feed: reading its tail; streams read by themselves meanwhile", "error", err)
		h.dropAll()
	}
	close(ready)
	poll := time.NewTimer(h.poll)
	defer poll.Stop()
	for {
		if !h.live() {
			return
		}
		full := false
		if err == nil {
			var events []fulfillment.OrderEvent
			readCtx, cancelRead := context.WithTimeout(ctx, 5*time.Second)
			events, err = h.store.FeedRead(readCtx, params)
			cancelRead()
			if err != nil {
				h.log.Warn("order event feed: reading; streams read by themselves meanwhile", "error", err)
				h.dropAll()
			} else if len(events) > 0 {
				params.After = events[len(events)-1].Cursor
				h.deliver(events)
				full = len(events) == feedBatch
			}
		} else {
			// Learn the tail again before reading on, then drop every
			// stream once more: one that subscribed meanwhile may have
			// read by itself before that tail, and catches up again.
			readCtx, cancelRead := context.WithTimeout(ctx, 5*time.Second)
			params.After, err = h.store.FeedTail(readCtx)
			cancelRead()
			if err == nil {
				h.dropAll()
			}
		}
		if full {
			continue
		}
		poll.Reset(h.poll)
		select {
		case <-wake:
		case <-poll.C:
		}
	}
}

// live reports whether the hub still has subscribers; when it has none,
// the reader is marked stopped, under the same lock as subscribe.
func (h *feedHub) live() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) == 0 {
		h.running = false
		return false
	}
	return true
}

// deliver hands events to every subscriber, dropping those that are full.
func (h *feedHub) deliver(events []fulfillment.OrderEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		select {
		case sub.batches <- events:
		default:
			delete(h.subs, sub)
			close(sub.batches)
		}
	}
}

// dropAll drops every subscriber.
func (h *feedHub) dropAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sub := range h.subs {
		delete(h.subs, sub)
		close(sub.batches)
	}
}
