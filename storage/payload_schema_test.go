package storage_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// schemaOf names the JSON Schema (docs/schemas/) of each topic's body.
var schemaOf = map[fulfillment.Topic]string{
	fulfillment.TopicFulfillmentRequested:    "fulfillment-requested.json",
	fulfillment.TopicOrderFulfilled:          "order-event.json",
	fulfillment.TopicOrderRefunded:           "order-event.json",
	fulfillment.TopicOrderOnHold:             "order-event.json",
	fulfillment.TopicSubscriptionRenewed:     "subscription-event.json",
	fulfillment.TopicSubscriptionPastDue:     "subscription-event.json",
	fulfillment.TopicSubscriptionAccessEnded: "subscription-event.json",
}

// Every body the service stores — of outbox messages and of the event
// feed, of every topic, written by the inbox's batches, by a delivery that
// completes its order and by the subscription sweeper — holds to the JSON
// Schema the docs publish for its type.
func TestPayloadsHoldToTheirSchemas(t *testing.T) {
	t.Parallel()
	schemas := compileSchemas(t)
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	externalOrder(t, s, "m-b")
	creditLicenseOrder(t, s, "m-a")
	creditLicenseOrder(t, s, "m-h")
	subscriptionOrder(t, s, "m-sub")
	deliver(t, s,
		confirmedEvent("b1", "m-b"),
		refundEvent("a1", "m-a", fulfillment.EventPaymentConfirmed, 20000),
		refundEvent("h1", "m-h", fulfillment.EventPaymentConfirmed, 100), // short: on hold
		firstPayment("s1", "sub_1", "m-sub"),
	)
	deliverNext(t, s, "licenses", fulfillment.OutcomeDelivered)
	deliverNext(t, s, "shipping", fulfillment.OutcomeDelivered) // order.fulfilled
	refund := refundEvent("a2", "m-a", fulfillment.EventRefunded, 20000)
	deliver(t, s, refund, subEvent("s2", "sub_1", fulfillment.EventSubscriptionOverdue, subJan1.AddDate(0, 1, 1), ""))
	// A subscription paid long ago, whose access the sweeper ends.
	long := time.Now().AddDate(0, -4, 0)
	ref := subRef
	ref.ProviderSubscriptionID = "sub_old"
	pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: long, InvoiceID: "inv_1"}
	_, rec, err := s.SubscriptionApply(ctx, ref, pay, "evt", subPlan)
	if err != nil {
		t.Fatal(err)
	}
	if swept, err := s.SubscriptionSweep(ctx, rec.ID, subPlan, time.Now()); err != nil || !swept {
		t.Fatalf("sweep = %v, %v", swept, err)
	}

	rows, err := conn.Query(ctx, `
		SELECT 'outbox message ' || id, topic, payload::text FROM outbox_messages
		UNION ALL SELECT 'feed event ' || id, topic, payload::text FROM order_events`)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[fulfillment.Topic]int{}
	for rows.Next() {
		var what, topic, body string
		if err := rows.Scan(&what, &topic, &body); err != nil {
			t.Fatal(err)
		}
		seen[fulfillment.Topic(topic)]++
		sch, ok := schemas[fulfillment.Topic(topic)]
		if !ok {
			t.Errorf("%s: topic %q has no schema", what, topic)
			continue
		}
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if err := sch.Validate(doc); err != nil {
			t.Errorf("%s (%s) does not hold to %s: %v\n%s", what, topic, schemaOf[fulfillment.Topic(topic)], err, body)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var missing []string
	for topic := range schemaOf {
		if seen[topic] == 0 {
			missing = append(missing, string(topic))
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("the scenario wrote no %v: it tests less than it says (seen %v)", missing, seen)
	}
}

// compileSchemas compiles the docs' schema of each topic.
func compileSchemas(t *testing.T) map[fulfillment.Topic]*jsonschema.Schema {
	t.Helper()
	dir := filepath.Join("..", "docs", "schemas")
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas in %s: %v", dir, err)
	}
	c := jsonschema.NewCompiler()
	ids := map[string]string{} // file name → $id
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		id, _ := doc.(map[string]any)["$id"].(string)
		if id == "" {
			t.Fatalf("%s has no $id", f)
		}
		if err := c.AddResource(id, doc); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		ids[filepath.Base(f)] = id
	}
	out := map[fulfillment.Topic]*jsonschema.Schema{}
	for topic, file := range schemaOf {
		sch, err := c.Compile(ids[file])
		if err != nil {
			t.Fatalf("compiling %s: %v", file, err)
		}
		out[topic] = sch
	}
	return out
}
