// Package chaos is the fault-injection run of fulfillmentd: real processes,
// a real PostgreSQL, provider-like load, and faults at random moments.
//
// Run starts a durable throwaway PostgreSQL and fulfillmentd (a built
// binary, run as a child process), creates orders, and delivers a workload
// of signed Yolfi webhooks the way a provider does — every event retried
// until it gets a 2xx, with redeliveries (some concurrent), out-of-order
// stale events, extra payments and test-mode events on the live endpoint —
// and, for a quarter of the orders, T-Bank notifications the way the bank
// does (retried until answered OK; reordered, redelivered, refunds: see
// tbank.go; a fifth of those orders overpaid, then refunded the excess
// first: overpaid.go), and for one Yolfi order in eight a subscription's renewals,
// lifecycle events and lapse (subscriptions.go), and T-Bank subscriptions'
// recurrent charges and their refunds, some before the charge (charges.go)
// — some orders created only
// after their events were processed (their payments come first), and for
// some subscriptions renewals and lifecycle events sent before their first
// payment (late matching queues both again) —
// while it SIGKILLs and restarts fulfillmentd and stops PostgreSQL in
// immediate mode and restarts it. During each database outage it asserts
// the outage contract: no 200, a 503 within 2 s, recovery within 5 s of the
// database returning. At the end it checks, from the database and the API,
// that every acknowledged event is stored, that every order has exactly the
// effects it is due and no more, and that nothing from test mode reached
// live.
//
// Half the orders also have external lines, fulfilled through the outbox by
// two loopback receivers in this process (never killed), each a configured
// destination with a short timeout: one honours idempotency keys (and also
// receives order.fulfilled), the other does not; both refuse, hang and drop
// connections now and then. Once the outbox has drained, the effects each
// receiver applied are counted per key: every message delivered was applied
// exactly once, none twice, nothing reached a receiver for an unpaid order,
// and every message whose fate is unknown (uncertain) or failed has its open
// reconciliation item and keeps its order fulfilling.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
)

// Options configures a run. Zero values take the full run's defaults.
type Options struct {
	Orders int // orders created (default 2000)
	Events int // distinct provider events, at least (default 20000); redeliveries come on top
	// Duration bounds the run from start to verdict (default 8m); the
	// verification itself may take a few seconds more.
	Duration   time.Duration
	Kills      int // SIGKILLs of fulfillmentd, at least (default 20)
	PGRestarts int // immediate stops of PostgreSQL, at least (default 2)
	// Concurrency bounds the sender's requests in flight (default 16).
	Concurrency int
	// Binary is the fulfillmentd to run (required).
	Binary string
	// WorkDir is where the run's folder (database, configuration,
	// fulfillmentd log) is created (default os.TempDir()). It must be
	// reachable by the postgres OS user when running as root.
	WorkDir string
	// Log receives progress lines (nil: discarded).
	Log io.Writer
	// Seed makes the workload and the fault schedule reproducible (0: a
	// random seed, reported).
	Seed int64
	// Rate is the offered rate of deliveries per second, which sets the
	// length of the send phase (default 120).
	Rate float64
	// KeepOnFailure keeps the run's folder when the run fails, for
	// inspection (its path is logged).
	KeepOnFailure bool
	// Pooler, when "transaction" or "session", puts a PgBouncer in that
	// pool mode (its default settings otherwise) between fulfillmentd and
	// PostgreSQL; in transaction mode the sessions (queue liveness,
	// LISTEN, migrations) go to PostgreSQL directly. "" runs without one.
	Pooler string
}

func (o *Options) setDefaults() error {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Orders, 2000)
	def(&o.Events, 20000)
	def(&o.Kills, 20)
	def(&o.PGRestarts, 2)
	def(&o.Concurrency, 16)
	if o.Duration <= 0 {
		o.Duration = 8 * time.Minute
	}
	if o.Rate <= 0 {
		o.Rate = 120
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.Seed = int64(binary.BigEndian.Uint64(b[:])>>2) + 1
	}
	if o.Events < 2*o.Orders {
		return fmt.Errorf("chaos: Events (%d) must be at least twice Orders (%d)", o.Events, o.Orders)
	}
	if o.Pooler != "" && o.Pooler != "transaction" && o.Pooler != "session" {
		return fmt.Errorf("chaos: Pooler %q: want transaction, session or nothing", o.Pooler)
	}
	if o.Binary == "" {
		return errors.New("chaos: Options.Binary (a built fulfillmentd) is required")
	}
	fi, err := os.Stat(o.Binary)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("chaos: %s is not an executable file", o.Binary)
	}
	if o.Binary, err = filepath.Abs(o.Binary); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// runner is one run in progress.
type runner struct {
	o        Options
	start    time.Time
	deadline time.Time
	viol     *violations

	dir         string
	cluster     *pgcluster.Cluster
	bouncer     *pgcluster.Bouncer // nil without Options.Pooler
	pgDown      atomic.Bool
	svc         *service
	conn        *grpc.ClientConn
	client      fulfillmentv1.FulfillmentServiceClient
	adminToken  string
	orgToken    string
	secrets     map[string][]byte
	w           *workload
	dests       []*destination
	snd         *sender
	outage      *outageWatch
	probeClient *http.Client

	logMu sync.Mutex

	mu           sync.Mutex // guards the fields below
	pgRestarts   int
	outageProbes int
	max503       time.Duration
	recoveries   []time.Duration
	probeCount   int
	// The REST API's answers during outages (informational).
	apiOutageAnswers map[string]int64
	maxAPIOutage     time.Duration
	sentProbes       map[string]bool // every probe event id sent
	ackedProbes      []*eventPlan
	// fulfilledBefore: the T-Bank orders (by merchant order id) whose
	// replay fulfilled them, refunded since or not (checkTBank).
	fulfilledBefore map[string]bool
	// subMessages are the outbox messages the subscriptions' events call
	// for, and subUnmatched the unmatched_payment items of their payments
	// by payment id (checkSubscriptions).
	subMessages  []subMessage
	subUnmatched map[string]int
	// lateFirstOrders are the late orders of registered subscriptions
	// paid before them (late_first.go), by id: checkLateFirst counts their
	// items.
	lateFirstOrders map[string]bool

	rep Report // figures filled in as the run goes
}

// Run carries out one chaos run. The error reports a run that could not be
// carried out (setup failure, ctx cancelled); what the run found is in the
// report's Violations.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.setDefaults(); err != nil {
		return Report{Incomplete: err.Error()}, err
	}
	r := &runner{
		o:                o,
		start:            time.Now(),
		viol:             newViolations(),
		outage:           &outageWatch{},
		sentProbes:       map[string]bool{},
		apiOutageAnswers: map[string]int64{},
		probeClient:      &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	r.deadline = r.start.Add(o.Duration)
	r.rep.Seed, r.rep.Pooler = o.Seed, o.Pooler
	r.logf("seed %d: %d orders, %d events, %d kills, %d PostgreSQL restarts, at most %v",
		o.Seed, o.Orders, o.Events, o.Kills, o.PGRestarts, o.Duration)

	err := r.run(ctx)
	r.cleanup(err != nil || len(r.viol.list()) > 0)
	rep := r.report()
	if err != nil {
		rep.Incomplete = err.Error()
	}
	return rep, err
}

func (r *runner) run(ctx context.Context) error {
	runCtx, cancel := context.WithDeadline(ctx, r.deadline)
	defer cancel()
	if err := r.setup(runCtx); err != nil {
		return err
	}
	superCtx, stopSupervisor := context.WithCancel(ctx)
	superDone := make(chan struct{})
	go func() { defer close(superDone); r.svc.supervise(superCtx) }()
	defer func() { stopSupervisor(); <-superDone }()

	if err := r.createOrders(runCtx); err != nil {
		return err
	}
	r.send(runCtx)
	if err := ctx.Err(); err != nil {
		return err
	}

	// Faults are over: the service must be whole again, and finish its work.
	verifyCtx, cancelVerify := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelVerify()
	if r.pgDown.Load() {
		if err := r.restartPG(verifyCtx); err != nil {
			return err
		}
	}
	if err := r.svc.ensureRunning(verifyCtx); err != nil {
		return fmt.Errorf("starting fulfillmentd for the verification: %w", err)
	}
	db, err := r.openDB(verifyCtx)
	if err != nil {
		return err
	}
	defer db.Close()
	r.settle(verifyCtx, db)
	if err := r.verify(verifyCtx, db); err != nil {
		return err
	}

	// A last contract: SIGTERM stops the service cleanly.
	stopSupervisor()
	<-superDone
	st, err := r.svc.stop(15 * time.Second)
	switch {
	case err != nil:
		r.viol.add("shutdown", "%v", err)
	case st != nil && !st.Success():
		r.viol.add("shutdown", "fulfillmentd exited with %v after SIGTERM, want status 0", st)
	}
	return ctx.Err()
}

// setup starts PostgreSQL and fulfillmentd.
func (r *runner) setup(ctx context.Context) error {
	dir, err := os.MkdirTemp(r.o.WorkDir, "chaos-")
	if err != nil {
		return fmt.Errorf("creating the run's folder: %w", err)
	}
	r.dir = dir
	// The server runs as the postgres OS user when we are root: it must be
	// able to enter the folder.
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if !pgcluster.Accessible(dir) {
		return fmt.Errorf("chaos: %s is not reachable by the PostgreSQL server's OS user; choose another WorkDir", dir)
	}
	r.logf("working in %s", dir)

	addrs, err := daemon.FreeAddrsOutsideEphemeral(4)
	if err != nil {
		return err
	}
	_, pgPort, _ := net.SplitHostPort(addrs[3])
	port, err := strconv.Atoi(pgPort)
	if err != nil {
		return err
	}
	r.cluster, err = pgcluster.Start(ctx, pgcluster.Options{
		Dir: filepath.Join(dir, "pg"), Port: port, Durable: true, Log: prefixWriter{r},
	})
	if err != nil {
		return fmt.Errorf("starting PostgreSQL: %w", err)
	}

	serveURL, sessionURL := r.cluster.URL("fulfillment"), ""
	if r.o.Pooler != "" {
		r.bouncer, err = pgcluster.StartBouncer(ctx, pgcluster.BouncerOptions{
			Dir: filepath.Join(dir, "pgbouncer"), Upstream: net.JoinHostPort("127.0.0.1", pgPort), Mode: r.o.Pooler})
		if err != nil {
			return fmt.Errorf("starting PgBouncer: %w", err)
		}
		r.logf("PgBouncer (pool_mode %s) on port %d", r.o.Pooler, r.bouncer.Port())
		if r.o.Pooler == "transaction" {
			sessionURL = serveURL
		}
		serveURL = r.bouncer.URL("fulfillment")
	}

	r.adminToken, r.orgToken = randomHex("tok-admin-"), randomHex("tok-org-")
	r.secrets = map[string][]byte{liveEP: []byte(randomHex("ywhsec_live_")), testEP: []byte(randomHex("ywhsec_test_")),
		tbankEP: []byte(randomHex("tbpw"))}
	env := []string{
		envDatabaseURL + "=" + serveURL,
		envAdminToken + "=" + r.adminToken,
		envOrgToken + "=" + r.orgToken,
		envLiveSecret + "=" + string(r.secrets[liveEP]),
		envTestSecret + "=" + string(r.secrets[testEP]),
		envTBankPassword + "=" + string(r.secrets[tbankEP]),
	}
	if sessionURL != "" {
		env = append(env, config.EnvSessionURL+"="+sessionURL)
	}
	var destinations []config.Destination
	for _, d := range newDestinations() {
		if err := d.start(r.o.Seed); err != nil {
			return fmt.Errorf("starting the receiver of %s: %w", d.id, err)
		}
		r.dests = append(r.dests, d)
		env = append(env, d.secretEnv+"="+d.secret)
		destinations = append(destinations, d.config())
		r.logf("destination %s (idempotent %v) receives at %s", d.id, d.idempotent, d.rcv.URL())
	}
	r.svc = &service{
		bin:          r.o.Binary,
		cfgPath:      filepath.Join(dir, "fulfillmentd.yaml"),
		logPath:      filepath.Join(dir, "fulfillmentd.log"),
		env:          daemon.ChildEnv(env...),
		destinations: destinations,
		grpcAddr:     addrs[0], httpAddr: addrs[1], ingestAddr: addrs[2],
		logf:    r.logf,
		viol:    r.viol,
		restart: make(chan struct{}, 1),
	}
	if err := daemon.WriteConfig(r.svc.cfgPath, r.svc.config()); err != nil {
		return err
	}
	if err := r.svc.start(ctx); err != nil {
		return fmt.Errorf("starting fulfillmentd: %w", err)
	}
	r.logf("fulfillmentd serves: gRPC %s, webhooks %s; PostgreSQL on port %d", r.svc.grpcAddr, r.svc.ingestAddr, port)
	r.conn, err = grpc.NewClient(r.svc.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	r.client = fulfillmentv1.NewFulfillmentServiceClient(r.conn)
	return nil
}

// createOrders plans the workload's orders and creates them, retrying any
// failure that may be transient: CreateOrder is idempotent.
func (r *runner) createOrders(ctx context.Context) error {
	r.w = newWorkload(r.o.Seed, r.o.Orders, r.secrets[tbankEP])
	t := time.Now()
	const workers = 8
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errMu sync.Mutex
		fatal error
	)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(r.w.orders) || ctx.Err() != nil {
					return
				}
				o := r.w.orders[i]
				// Late orders: createLateOrders; those of a subscription
				// paid before them are registered now (late_first.go).
				if !o.late || o.lateFirstSub() {
					if err := r.create(ctx, o, o.late || o.sub != nil && o.sub.tbank); err != nil {
						errMu.Lock()
						fatal = err
						errMu.Unlock()
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if fatal != nil {
		return fatal
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("creating orders: %w", err)
	}
	lf := r.w.stats.LateFirst.Stories
	r.logf("created %d orders and registered %d subscriptions in %v (%d more orders to create after their events)",
		len(r.w.orders)-r.w.stats.LateOrders-lf, lf, time.Since(t).Round(time.Millisecond), r.w.stats.LateOrders+lf)
	return nil
}

// createOrder creates o, retrying any failure that may be transient
// (CreateOrder is idempotent) until ctx ends; it returns the error of a
// request refused for good. A charged subscription has no order: it
// registers the subscription (CreateSubscription, idempotent too).
func (r *runner) createOrder(ctx context.Context, o *orderPlan) error {
	return r.create(ctx, o, o.sub != nil && o.sub.tbank)
}

// create creates o as createOrder does, or registers its subscription
// instead when register.
func (r *runner) create(ctx context.Context, o *orderPlan, register bool) error {
	for try := 0; ; try++ {
		callCtx, cancel := context.WithTimeout(r.authed(ctx, r.orgToken), 10*time.Second)
		var err error
		if register {
			_, err = r.client.CreateSubscription(callCtx, o.sub.registration())
		} else {
			var resp *fulfillmentv1.CreateOrderResponse
			if resp, err = r.client.CreateOrder(callCtx, o.request()); err == nil {
				o.id = resp.GetOrder().GetId()
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		switch status.Code(err) {
		case codes.InvalidArgument, codes.AlreadyExists, codes.PermissionDenied, codes.Unauthenticated:
			return fmt.Errorf("creating order %s: %w", o.mid, err)
		default:
			// Anything else may pass (a restart, an outage): retry.
		}
		if ctx.Err() != nil {
			return nil
		}
		time.Sleep(min(time.Duration(try+1)*100*time.Millisecond, time.Second))
	}
}

// lateOrderEvents are the events of each late order, by order index.
func (r *runner) lateOrderEvents() map[int][]int {
	evs := map[int][]int{}
	for j, e := range r.w.events {
		if e.order >= 0 && r.w.orders[e.order].late {
			evs[e.order] = append(evs[e.order], j)
		}
	}
	return evs
}

// createLateOrders creates each late order once every event of it is
// processed (decided unmatched: the order does not exist) or, a racing
// one, once the first of its events is acknowledged (stored, perhaps being
// decided), while the faults go on, until ctx ends.
func (r *runner) createLateOrders(ctx context.Context, gate *processedGate) {
	var wg sync.WaitGroup
	for i, evs := range r.lateOrderEvents() {
		wg.Go(func() {
			o := r.w.orders[i]
			switch {
			case o.racing:
				if !r.snd.waitAcked(ctx, evs) {
					return
				}
			case gate == nil || !gate.waitAll(ctx, evs, true):
				return
			}
			if err := r.createOrder(ctx, o); err != nil {
				r.viol.add("harness", "creating a late order: %v", err)
			}
		})
	}
	wg.Wait()
}

// send plans the events over the send window and delivers them while the
// faults are injected; it returns once every event is acknowledged and every
// fault is done, or the time budget for sending is spent.
func (r *runner) send(ctx context.Context) {
	// Keep time after sending for draining retries, settling and checking.
	reserve := max(10*time.Second, r.o.Duration/8)
	sendDeadline := r.deadline.Add(-reserve)
	planned := time.Duration(float64(r.o.Events) * 1.25 / r.o.Rate * float64(time.Second))
	window := min(planned, time.Until(sendDeadline)*3/4)
	window = max(window, 5*time.Second)
	r.w.planEvents(r.o.Events, window, time.Now())
	st := r.w.stats
	r.rep.Orders, r.rep.TestOnlyOrders, r.rep.Events = st.Orders, st.TestOnlyOrders, st.Events
	r.rep.TestModeEvents, r.rep.ExtraPayments, r.rep.StaleEvents = st.TestModeEvents, st.ExtraPayments, st.StaleEvents
	r.rep.Redeliveries, r.rep.Concurrent, r.rep.Deliveries = st.Redeliveries, st.Concurrent, st.Deliveries
	r.rep.ExternalLines, r.rep.LateOrders, r.rep.RacingOrders = st.ExternalLines, st.LateOrders, st.RacingOrders
	r.rep.TBank, r.rep.Overpaid = st.TBank, st.Overpaid
	r.rep.Subscriptions = st.Subscriptions
	r.rep.LateFirst = st.LateFirst
	r.rep.SendWindow = window
	faults := planFaults(r.o.Seed, window, r.o.Kills, r.o.PGRestarts)
	r.logf("sending %d deliveries of %d events over %v (%.0f/s) with %d faults",
		st.Deliveries, st.Events, window.Round(time.Second), float64(st.Deliveries)/window.Seconds(), len(faults))

	sendCtx, cancel := context.WithDeadline(ctx, sendDeadline)
	defer cancel()
	r.snd = newSender(r.svc.ingestAddr, r.secrets, r.w.events, r.o.Concurrency, r.outage, r.viol)
	gate, stopGate, err := r.startGate(sendCtx)
	if err != nil {
		r.viol.add("harness", "watching the inbox for the events others come after: %v", err)
		return
	}
	defer stopGate()
	r.snd.gate = gate
	start := time.Now()
	var wg sync.WaitGroup
	wg.Go(func() { r.injectFaults(sendCtx, start, faults) })
	wg.Go(func() { r.snd.run(sendCtx, start, r.w.deliveries) })
	wg.Go(func() { r.createLateOrders(sendCtx, gate) })
	progressDone := make(chan struct{})
	go func() {
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-progressDone:
				return
			case <-tick.C:
				r.logf("progress: %d/%d events acknowledged, %d requests, %d kills, %d PostgreSQL restarts",
					r.snd.ackedCount(), len(r.w.events), r.snd.requests.Load(), r.svc.kills.Load(), r.pgRestartCount())
			}
		}
	}()
	wg.Wait()
	close(progressDone)
	r.rep.SendPhase = time.Since(start)

	acked := r.snd.ackedCount()
	r.logf("send phase over after %v: %d/%d events acknowledged", r.rep.SendPhase.Round(100*time.Millisecond), acked, len(r.w.events))
	if errors.Is(ctx.Err(), context.Canceled) {
		return // interrupted: what was not done is no violation
	}
	if missing := len(r.w.events) - acked; missing > 0 {
		r.viol.add("unacknowledged", "%d of %d events were never acknowledged within the time budget (%v)",
			missing, len(r.w.events), r.o.Duration)
	}
	if k := int(r.svc.kills.Load()); k < r.o.Kills {
		r.viol.add("faults", "only %d of %d fulfillmentd kills were done within the time budget", k, r.o.Kills)
	}
	if n := r.pgRestartCount(); n < r.o.PGRestarts {
		r.viol.add("faults", "only %d of %d PostgreSQL restarts were done within the time budget", n, r.o.PGRestarts)
	}
}

func (r *runner) pgRestartCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pgRestarts
}

// settle waits until no inbox event is pending, then until no subscription
// sweep is due, then until the outbox has delivered what it can (no
// message pending) and the receivers are idle.
func (r *runner) settle(ctx context.Context, db *pgxpool.Pool) {
	r.rep.Settle = r.waitNonePending(ctx, db, "inbox_events", "unprocessed")
	r.waitSweeps(ctx, db)
	r.rep.Drain = r.waitNonePending(ctx, db, "outbox_messages", "stuck pending")
	r.quiesce()
}

// waitNonePending waits until no row of table is pending, or reports those
// that still are as violations of category; it returns how long it waited.
func (r *runner) waitNonePending(ctx context.Context, db *pgxpool.Pool, table, category string) time.Duration {
	t := time.Now()
	limit := max(time.Until(r.deadline), 20*time.Second)
	var pending int
	for {
		err := db.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE state = 'pending'").Scan(&pending)
		if err == nil && pending == 0 {
			break
		}
		if time.Since(t) > limit || ctx.Err() != nil {
			r.viol.add(category, "%d rows of %s still pending %v after the send phase (last error: %v)",
				pending, table, time.Since(t).Round(time.Second), err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(t)
	r.logf("%s settled in %v", table, took.Round(100*time.Millisecond))
	return took
}

// cleanup stops whatever still runs and removes the run's folder.
func (r *runner) cleanup(failed bool) {
	if r.svc != nil {
		if _, err := r.svc.stop(10 * time.Second); err != nil {
			r.logf("%v", err)
		}
		r.svc.watchers.Wait()
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	for _, d := range r.dests {
		if err := d.rcv.Close(); err != nil {
			r.logf("closing the receiver of %s: %v", d.id, err)
		}
	}
	if r.snd != nil {
		r.snd.client.CloseIdleConnections()
	}
	if r.bouncer != nil {
		_ = r.bouncer.Stop()
	}
	if r.cluster != nil {
		if err := r.cluster.Stop(); err != nil {
			r.logf("stopping PostgreSQL: %v", err)
		}
	}
	if r.dir == "" {
		return
	}
	if failed && r.o.KeepOnFailure {
		r.logf("kept the run's folder %s (fulfillmentd.log, pg/postgres.log, pg/data)", r.dir)
		return
	}
	if err := os.RemoveAll(r.dir); err != nil {
		r.logf("removing %s: %v", r.dir, err)
	}
}

// report assembles the final report.
func (r *runner) report() Report {
	rep := r.rep
	if r.snd != nil {
		rep.Acked = r.snd.ackedCount()
		rep.Requests, rep.Retries = r.snd.requests.Load(), r.snd.retries.Load()
		r.snd.mu.Lock()
		rep.Answers = maps.Clone(r.snd.answers)
		r.snd.mu.Unlock()
	}
	r.mu.Lock()
	rep.Acked += len(r.ackedProbes)
	rep.PGRestarts, rep.OutageProbes, rep.Max503Latency = r.pgRestarts, r.outageProbes, r.max503
	rep.Recoveries = append([]time.Duration(nil), r.recoveries...)
	rep.OutageAPIAnswers = maps.Clone(r.apiOutageAnswers)
	rep.MaxAPIOutageLatency = r.maxAPIOutage
	r.mu.Unlock()
	if r.svc != nil {
		rep.Kills, rep.UnexpectedExits, rep.Starts = int(r.svc.kills.Load()), int(r.svc.surprise.Load()), int(r.svc.starts.Load())
	}
	rep.Elapsed = time.Since(r.start)
	rep.Violations = r.viol.list()
	return rep
}

// authed adds the bearer token to ctx.
func (*runner) authed(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// logf writes one progress line, stamped with the time since the start.
func (r *runner) logf(format string, args ...any) {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	_, _ = fmt.Fprintf(r.o.Log, "chaos [%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// prefixWriter turns pgcluster's progress lines into run log lines.
type prefixWriter struct{ r *runner }

func (w prefixWriter) Write(p []byte) (int, error) {
	w.r.logf("%s", trimNewline(string(p)))
	return len(p), nil
}

func trimNewline(s string) string {
	for s != "" && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	return s
}

// randomHex is prefix followed by 32 random hex digits.
func randomHex(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}
