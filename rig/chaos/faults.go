package chaos

import (
	"cmp"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// The database outage contract (issue part 4), asserted during every
// PostgreSQL stop.
const (
	// outageFor is how long PostgreSQL stays down.
	outageFor = 2500 * time.Millisecond
	// outageProbes are sent while it is down, spread over the outage.
	outageProbes = 3
	// max503 bounds the answer to a webhook while the database is down:
	// ingest.timeout (2s, see service.go), and a moment to write the answer.
	// Straight to PostgreSQL the 503 comes at once (connection refused);
	// behind PgBouncer, which holds the query while it tries to reach the
	// server, it comes when the timeout ends.
	max503 = 2*time.Second + 100*time.Millisecond
	// maxRecovery bounds database back → first 200.
	maxRecovery = 5 * time.Second
	// bouncerLoginRetry is PgBouncer's default server_login_retry: after a
	// failed connection to the server it waits this long before the next,
	// answering its clients with an error meanwhile. Behind it, recovery
	// may take that much longer.
	bouncerLoginRetry = 15 * time.Second
	// recoveryPoll is the interval of the recovery probe's retries.
	recoveryPoll = 100 * time.Millisecond
	// minFaultGap lets the service run a moment between two faults.
	minFaultGap = 750 * time.Millisecond
)

type faultKind int

const (
	faultKill faultKind = iota // SIGKILL fulfillmentd, restart it
	faultPG                    // stop PostgreSQL in immediate mode, restart it
)

type fault struct {
	at   time.Duration // from the start of the send phase
	kind faultKind
}

// planFaults spreads kills at random over the send window and PostgreSQL
// stops over its strata, so outages do not bunch up.
func planFaults(seed int64, window time.Duration, kills, pgStops int) []fault {
	rng := rand.New(rand.NewPCG(uint64(seed)+1, uint64(seed)^0x5851f42d4c957f2d))
	lo, hi := window/20, window*85/100 // faults may drift later: each waits for the previous one
	var fs []fault
	for range kills {
		fs = append(fs, fault{at: lo + time.Duration(rng.Int64N(int64(hi-lo))), kind: faultKill})
	}
	for i := range pgStops {
		stratum := (hi - lo) / time.Duration(pgStops)
		at := lo + time.Duration(i)*stratum + stratum/4 + time.Duration(rng.Int64N(int64(stratum/2)+1))
		fs = append(fs, fault{at: at, kind: faultPG})
	}
	slices.SortFunc(fs, func(a, b fault) int { return cmp.Compare(a.at, b.at) })
	return fs
}

// injectFaults runs the faults one after the other — never two at once, so
// that an outage is measured with fulfillmentd up — each at its planned
// time, or a moment after the previous one ends.
func (r *runner) injectFaults(ctx context.Context, start time.Time, faults []fault) {
	prevEnd := start
	for _, f := range faults {
		at := start.Add(f.at)
		if earliest := prevEnd.Add(minFaultGap); at.Before(earliest) {
			at = earliest
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(at)):
		}
		if ctx.Err() != nil {
			return
		}
		switch f.kind {
		case faultKill:
			r.killService(ctx)
		case faultPG:
			r.pgOutage(ctx)
		}
		prevEnd = time.Now()
	}
}

// killService SIGKILLs fulfillmentd and restarts it at once.
func (r *runner) killService(ctx context.Context) {
	t := time.Now()
	err := r.svc.kill(ctx)
	for err != nil && ctx.Err() == nil {
		r.viol.add("restart", "fulfillmentd did not come back after a SIGKILL: %v", err)
		time.Sleep(time.Second)
		err = r.svc.ensureRunning(ctx)
	}
	r.logf("fault: fulfillmentd SIGKILLed and restarted (kill %d) in %v", r.svc.kills.Load(), time.Since(t).Round(time.Millisecond))
}

// pgOutage stops PostgreSQL like a crash (pg_ctl stop -m immediate), probes
// the webhook endpoint while it is down — never 200; 503 within the ingest
// timeout while fulfillmentd is up — restarts it, and measures how long the
// service takes to acknowledge a delivery again (at most 5s; behind
// PgBouncer, plus its server_login_retry).
func (r *runner) pgOutage(ctx context.Context) {
	if err := r.cluster.Kill(); err != nil {
		r.viol.add("fault", "stopping PostgreSQL: %v", err)
		return
	}
	r.pgDown.Store(true)
	r.outage.begin()
	down := time.Now()
	r.logf("fault: PostgreSQL stopped (immediate mode)")
	for i := range outageProbes {
		r.outageProbe(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(down.Add(time.Duration(i+1) * outageFor / (outageProbes + 1)))):
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(down.Add(outageFor))):
	}
	r.outage.end()
	if err := r.restartPG(ctx); err != nil {
		return
	}
	back := time.Now()
	r.mu.Lock()
	r.pgRestarts++
	r.mu.Unlock()

	// The recovery probe: one fresh event, retried every 100ms until 200.
	ev := r.newProbe()
	recoveryBound := maxRecovery
	if r.bouncer != nil {
		recoveryBound += bouncerLoginRetry
	}
	reported := false
	for ctx.Err() == nil {
		code, _ := r.probe(ctx, ev)
		took := time.Since(back)
		if ctx.Err() != nil {
			return
		}
		if code == http.StatusOK {
			r.mu.Lock()
			r.recoveries = append(r.recoveries, took)
			r.ackedProbes = append(r.ackedProbes, ev)
			r.mu.Unlock()
			r.logf("fault: PostgreSQL restarted; first webhook acknowledged %v after it was back", took.Round(time.Millisecond))
			return
		}
		if took > recoveryBound && !reported {
			reported = true
			r.viol.add("slow recovery", "no webhook acknowledged %v after PostgreSQL was back (last answer %d), want within %v",
				took.Round(time.Millisecond), code, recoveryBound)
		}
		if took > time.Minute {
			r.viol.add("no recovery", "the service did not acknowledge a webhook within a minute of PostgreSQL returning")
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(recoveryPoll):
		}
	}
}

// restartPG brings PostgreSQL back, retrying a few times.
func (r *runner) restartPG(ctx context.Context) error {
	var err error
	for try := 0; try < 5; try++ {
		if err = r.cluster.Restart(context.WithoutCancel(ctx)); err == nil {
			r.pgDown.Store(false)
			return nil
		}
		r.logf("restarting PostgreSQL: %v", err)
		time.Sleep(time.Second)
	}
	r.viol.add("fault", "PostgreSQL did not restart: %v", err)
	return err
}

// outageProbe sends one fresh event while PostgreSQL is down.
func (r *runner) outageProbe(ctx context.Context) {
	up := r.svc.running()
	code, took := r.probe(ctx, r.newProbe())
	stillUp := r.svc.running()
	if ctx.Err() != nil {
		return // the run is over: no verdict on a cancelled request
	}
	r.mu.Lock()
	r.outageProbes++
	r.max503 = max(r.max503, took)
	r.mu.Unlock()
	switch {
	case code == http.StatusOK:
		r.viol.add("200 during outage", "a webhook was acknowledged while PostgreSQL was down")
	case !up || !stillUp:
		r.logf("outage probe answered %d in %v while fulfillmentd was not running", code, took)
	case code != http.StatusServiceUnavailable:
		r.viol.add("outage answer", "a webhook sent while PostgreSQL was down answered %d in %v (0: no answer), want 503", code, took.Round(time.Millisecond))
	case took > max503:
		r.viol.add("slow 503", "a webhook sent while PostgreSQL was down took %v to get its 503, want at most %v", took.Round(time.Millisecond), max503)
	}

	// The API during the outage, for the record: never 200 (it reads the
	// database); its status is reported, the contract above binds webhooks.
	code, took = r.apiProbe(ctx)
	if ctx.Err() != nil || !up || !r.svc.running() {
		return
	}
	r.mu.Lock()
	r.apiOutageAnswers[strconv.Itoa(code)]++
	r.maxAPIOutage = max(r.maxAPIOutage, took)
	r.mu.Unlock()
	if code == http.StatusOK {
		r.viol.add("200 during outage", "GET /v1/orders/{id} answered 200 while PostgreSQL was down")
	}
}

// apiProbe reads an order through the REST gateway.
func (r *runner) apiProbe(ctx context.Context) (int, time.Duration) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.svc.httpAddr+"/v1/orders/"+r.w.orders[0].id, http.NoBody)
	if err != nil {
		return 0, 0
	}
	req.Header.Set("Authorization", "Bearer "+r.orgToken)
	start := time.Now()
	resp, err := r.probeClient.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, took
}

// newProbe returns a fresh probe event.
func (r *runner) newProbe() *eventPlan {
	r.mu.Lock()
	r.probeCount++
	n := r.probeCount
	r.mu.Unlock()
	ev := probeEvent(n)
	r.mu.Lock()
	r.sentProbes[ev.id] = true
	r.mu.Unlock()
	return ev
}

// probe posts ev once on a fresh connection and returns the status (0: no
// answer) and how long the answer took.
func (r *runner) probe(ctx context.Context, ev *eventPlan) (int, time.Duration) {
	req, err := yolfi.NewRequest(ctx, "http://"+r.svc.ingestAddr+"/webhooks/"+ev.endpoint, r.secrets[ev.endpoint], ev.body, ev.id)
	if err != nil {
		return 0, 0
	}
	start := time.Now()
	resp, err := r.probeClient.Do(req)
	took := time.Since(start)
	if err != nil {
		return 0, took
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, took
}
