package storage

// KeptTable is a table that triggers keep in step with another one, its
// source, whoever writes the source: what it holds, and the SQL of the rows
// it must hold (Want, read from the source) and of the rows it holds (Got,
// the same columns in the same order). The tests and make chaos hold each
// table to its source; an operator can run the same two queries.
type KeptTable struct{ Table, Holds, Want, Got string }

// KeptTables are the tables kept by triggers: the sets defined by a state
// or a decision, kept as rows of their own so that the updates of their
// sources can be HOT (migrations 033, 034 and 035).
var KeptTables = []KeptTable{
	{"orders_unsettled", "the paid orders not settled",
		`SELECT id, org_id, environment, state, paid_at FROM orders
			WHERE paid_at IS NOT NULL AND state IN ('paid', 'fulfilling', 'on_hold')`,
		`SELECT order_id, org_id, environment, state, paid_at FROM orders_unsettled`},
	{"outbox_stuck", "the failed and uncertain messages",
		`SELECT id, org_id, environment, destination_id, state FROM outbox_messages WHERE state IN ('failed', 'uncertain')`,
		`SELECT message_id, org_id, environment, destination_id, state FROM outbox_stuck`},
	{"inbox_unresolved", "the failed and unmatched events",
		`SELECT id, org_id, environment, provider, state, received_at, merchant_order_id, checkout_session_id, subscription_id,
			CASE WHEN kind IN ('refunded', 'partially_refunded') THEN payment_id END
			FROM inbox_events WHERE state IN ('failed', 'unmatched')`,
		`SELECT event_id, org_id, environment, provider, state, received_at, merchant_order_id, checkout_session_id,
			subscription_id, payment_id FROM inbox_unresolved`},
	{"inbox_event_orders", "the events linked to an order",
		`SELECT order_id, id FROM inbox_events WHERE order_id IS NOT NULL`,
		`SELECT order_id, event_id FROM inbox_event_orders`},
}
