-- Finding orders by a customer's reference (the account a line credits,
-- or the customer a subscription line pays for) and by a payment's
-- reference at its provider (an invoice, payment or checkout session): the
-- console's and ListOrders' customer_ref and payment_ref filters; and by
-- merchant order id without naming the org.
CREATE INDEX order_lines_account_ref_idx ON order_lines (account_ref) WHERE account_ref IS NOT NULL;
CREATE INDEX payment_attempts_attempt_ref_idx ON payment_attempts (attempt_ref);
-- A merchant order id searched across the orgs a caller may see (the
-- unique key leads with the org: it serves one org's lookups only).
CREATE INDEX orders_merchant_order_id_idx ON orders (merchant_order_id);

---- create above / drop below ----

DROP INDEX orders_merchant_order_id_idx;
DROP INDEX payment_attempts_attempt_ref_idx;
DROP INDEX order_lines_account_ref_idx;
