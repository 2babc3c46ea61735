package e2e_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// A database whose own settings acknowledge a commit before it is durable
// (synchronous_commit off, set for the database here) is named at start, at
// WARN: the service's promise that a webhook answered 200 is kept rests on
// it. PostgreSQL's default says nothing.
func TestUndurableCommitsAreNamed(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		dbURL := pgtest.DB(t)
		if off {
			pgtest.SetDatabase(t, dbURL, "synchronous_commit", "off")
		}
		sink := &logSink{}
		s := startService(t, dbURL, nil, slog.New(slog.NewJSONHandler(sink, nil)))
		o := s.createOrder(t, "live", "durable-1")
		s.sendOK(t, event(yolfi.TypePaymentConfirmed, "durable-1", "inv_durable_1"))
		s.settle(t)
		if e := s.effects(t, o.GetId()); e.State != "fulfilled" {
			t.Errorf("synchronous_commit off %v: %v, want fulfilled", off, e)
		}
		if off {
			waitFor(t, "the warning naming synchronous_commit", sink.said("synchronous_commit is off"))
			continue
		}
		// By now the check has run (it starts with the service, before its
		// first order): nothing said.
		time.Sleep(500 * time.Millisecond)
		if sink.said("synchronous_commit is off")() {
			t.Error("synchronous_commit on (the default), yet the service warns that it is off")
		}
	}
}
