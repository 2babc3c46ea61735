package chaos

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// Retry backoff of the sender: like a provider, it retries every delivery
// until it gets a 2xx.
const (
	firstBackoff = 50 * time.Millisecond
	maxBackoff   = 500 * time.Millisecond
	// requestTimeout bounds one try; the service answers 503 after its
	// ingest timeout (2s) anyway.
	requestTimeout = 10 * time.Second
)

// sender delivers signed events to the webhook endpoints the way a
// provider does: Yolfi's until a 2xx, T-Bank's until a 200 whose body is
// exactly OK.
type sender struct {
	client    *http.Client
	ingestURL string // http://host:port/webhooks/
	secrets   map[string][]byte
	events    []*eventPlan
	acked     []atomic.Bool // by event index
	sem       chan struct{} // bounds requests in flight
	outage    *outageWatch
	viol      *violations
	// gate holds back events until those they come after are processed
	// (nil: none waits).
	gate *processedGate

	requests, retries atomic.Int64
	mu                sync.Mutex
	answers           map[string]int64
}

func newSender(ingestAddr string, secrets map[string][]byte, events []*eventPlan, concurrency int, outage *outageWatch, viol *violations) *sender {
	return &sender{
		client: &http.Client{Timeout: requestTimeout, Transport: &http.Transport{
			MaxIdleConns: concurrency, MaxIdleConnsPerHost: concurrency, IdleConnTimeout: 30 * time.Second,
		}},
		ingestURL: "http://" + ingestAddr + "/webhooks/",
		secrets:   secrets,
		events:    events,
		acked:     make([]atomic.Bool, len(events)),
		sem:       make(chan struct{}, concurrency),
		outage:    outage,
		viol:      viol,
		answers:   map[string]int64{},
	}
}

// run dispatches every delivery at its planned time after start, each in
// its own goroutine retrying until acknowledged, and returns once all are
// acknowledged or ctx ends. Redeliveries planned for one moment leave
// together: concurrent duplicates.
func (s *sender) run(ctx context.Context, start time.Time, deliveries []delivery) {
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	for _, d := range deliveries {
		if wait := time.Until(start.Add(d.at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		ev := s.events[d.ev]
		body := ev.body
		if d.alt {
			body = ev.alt
		}
		wg.Go(func() { s.deliver(ctx, ev, d.ev, body) })
	}
	wg.Wait()
}

// deliver sends one event (as body) until it is acknowledged, like a
// provider: connection errors, timeouts and 5xx are retried with a capped
// backoff. A 4xx is a violation (the events are valid and signed), and is
// not retried.
func (s *sender) deliver(ctx context.Context, ev *eventPlan, idx int, body []byte) {
	if s.gate != nil && idx >= 0 && !s.gate.wait(ctx, idx) {
		return
	}
	backoff := firstBackoff
	for try := 0; ctx.Err() == nil; try++ {
		if try > 0 {
			s.retries.Add(1)
			jittered := backoff/2 + rand.N(backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(jittered):
			}
			backoff = min(2*backoff, maxBackoff)
		}
		code, acked := s.post(ctx, ev, body)
		switch {
		case acked:
			if idx >= 0 {
				s.acked[idx].Store(true)
			}
			return
		case code >= 400 && code < 500:
			s.viol.add("rejected delivery", "event %s (%s, %s) answered %d: a valid signed event must be accepted", ev.id, ev.typ, ev.endpoint, code)
			return
		}
	}
}

// post sends the event once and returns the HTTP status (0 when there was
// no answer) and whether it acknowledges the event: a 2xx for Yolfi, a 200
// whose body is exactly OK for T-Bank (whose bank takes anything else for a
// failure, and retries; a 2xx with another body is a violation). A 200 for
// a request sent after PostgreSQL was stopped and answered before it was
// restarted is a violation: nothing can have been committed.
func (s *sender) post(ctx context.Context, ev *eventPlan, body []byte) (int, bool) {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, false
	}
	defer func() { <-s.sem }()
	s.requests.Add(1)
	url := s.ingestURL + ev.endpoint
	tbankEvent := ev.endpoint == tbankEP
	var req *http.Request
	var err error
	if tbankEvent {
		if req, err = http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body)); err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
	} else {
		req, err = yolfi.NewRequest(ctx, url, s.secrets[ev.endpoint], body, ev.id)
	}
	if err != nil {
		s.count("error")
		return 0, false
	}
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.count("error")
		}
		return 0, false
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 64))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	s.count(strconv.Itoa(resp.StatusCode))
	code := resp.StatusCode
	acked := code >= 200 && code < 300
	if tbankEvent && acked && (code != http.StatusOK || string(answer) != "OK") {
		s.viol.add("T-Bank answer", "notification %s answered %d %q: the bank takes only 200 OK as stored, and retries", ev.id, code, answer)
		acked = false
	}
	if code == http.StatusOK && s.outage.during(start) {
		s.viol.add("200 during outage", "event %s acknowledged while PostgreSQL was down (request sent after it stopped, answered before it restarted)", ev.id)
	}
	return code, acked
}

func (s *sender) count(answer string) {
	s.mu.Lock()
	s.answers[answer]++
	s.mu.Unlock()
}

// waitAcked returns true once any event of evs is acknowledged, false
// when ctx ends first.
func (s *sender) waitAcked(ctx context.Context, evs []int) bool {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, j := range evs {
			if s.acked[j].Load() {
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// ackedCount is the number of distinct events acknowledged.
func (s *sender) ackedCount() int {
	n := 0
	for i := range s.acked {
		if s.acked[i].Load() {
			n++
		}
	}
	return n
}

// outageWatch knows whether PostgreSQL is down, for judging answers.
type outageWatch struct {
	mu    sync.Mutex
	down  bool
	since time.Time
}

// begin marks PostgreSQL stopped (call once its server has exited).
func (w *outageWatch) begin() {
	w.mu.Lock()
	w.down, w.since = true, time.Now()
	w.mu.Unlock()
}

// end marks PostgreSQL about to restart.
func (w *outageWatch) end() {
	w.mu.Lock()
	w.down = false
	w.mu.Unlock()
}

// during reports whether a request sent at start was sent and answered
// entirely within an outage: the database stopped before it was sent and is
// still down now.
func (w *outageWatch) during(start time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.down && start.After(w.since)
}
