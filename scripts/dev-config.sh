#!/usr/bin/env bash
# Writes the development configuration used by `make run` into DIR (again
# at every run: change it with the FULFILLMENT_* environment overrides of
# docs/configuration.md, not by editing the file; FULFILLCTL_LISTEN_ADDR and
# FAKEBANK_LISTEN_ADDR move the dev listener and the fake bank, as
# FULFILLMENT_LISTEN_* move the service, e.g. for a second make run:
# docs/development.md),
# with freshly generated dev tokens kept in files next to it, and the banner
# telling how to call the service (banner.txt, printed by make run once the
# service serves). Never use this configuration in production.
set -euo pipefail
dir=${1:?usage: dev-config.sh DIR}
mkdir -p "$dir"
chmod 700 "$dir"

grpc=${FULFILLMENT_LISTEN_GRPC:-127.0.0.1:9090}
http=${FULFILLMENT_LISTEN_HTTP:-127.0.0.1:8080}
ingest=${FULFILLMENT_LISTEN_INGEST:-127.0.0.1:8081}

token() { # a random dev token in file $1, kept across runs
	[ -s "$1" ] || { umask 077; od -An -tx1 -N24 /dev/urandom | tr -d ' \n' > "$1"; }
}
token "$dir/admin.token"
token "$dir/checkout.token"
token "$dir/yolfi-test.secret"
token "$dir/tbank-test.password" # the fake bank's terminal password
bank=${FAKEBANK_LISTEN_ADDR:-127.0.0.1:8099}
# The Standard Webhooks secret outbox deliveries are signed with:
# whsec_ and the base64 of 24 random bytes.
[ -s "$dir/outbox.secret" ] || { umask 077; printf 'whsec_%s\n' "$(head -c 24 /dev/urandom | base64)" > "$dir/outbox.secret"; }
listener=${FULFILLCTL_LISTEN_ADDR:-127.0.0.1:8090}

cat > "$dir/config.yaml" <<YAML
# Development configuration written by scripts/dev-config.sh (make run).
listen: { grpc: "$grpc", http: "$http", ingest: "$ingest" }
database:
  url_env: DATABASE_URL
  migrate: true
auth:
  tokens:
    - { name: dev-admin, token_file: $dir/admin.token, scopes: [admin], orgs: ["*"] }
    - { name: checkout, token_file: $dir/checkout.token, scopes: [orders:write, orders:read], orgs: [org_demo] }
endpoints:
  - id: yolfi-test
    provider: yolfi
    org: org_demo
    environment: test
    secrets: [ { file: $dir/yolfi-test.secret } ]
  # A T-Bank terminal at the fake bank (go run ./rig/cmd/fakebank), for development.
  - id: tbank-test
    provider: tbank
    org: org_demo
    environment: test
    secrets: [ { file: $dir/tbank-test.password } ]
    options:
      terminal_key: DevTerminalDEMO
      api_url: "http://$bank"
      notification_url: "http://$ingest/webhooks/tbank-test"
      duplicate_order_codes: ["8"]
      duplicate_order_policy: reuse
destinations:
  # fulfillctl listen, for development: it receives the fulfillment
  # requests of external lines naming dev-listener, and every order event.
  - id: dev-listener
    url: "http://$listener/"
    secrets: [ { file: $dir/outbox.secret } ]
    idempotent: true
    timeout: 5s
    events: [order.fulfilled, order.refunded, order.on_hold,
             subscription.renewed, subscription.past_due, subscription.access_ended]
plans:
  # A monthly plan: access for a calendar month per paid period, and 72 h of
  # grace while a renewal is awaited (or overdue).
  - id: pro-monthly
    months: 1
    grace: 72h
subscription_sweep:
  poll: 5s
inbox:
  poll: 500ms
outbox:
  poll: 500ms
  max_backoff: 30s
status_poll:
  after: 30s          # a started payment without news is asked about after 30 s (production: 10m)
  base_backoff: 10s
  max_backoff: 1m
log:
  level: info
  format: text        # key=value lines for a terminal (production: json)
YAML

# The banner: make run prints it once the service answers /readyz.
addr=""
if [ "$grpc" != 127.0.0.1:9090 ]; then # fulfillctl's default address
	addr="
  gRPC is not on fulfillctl's default address: first, in each terminal, export FULFILLCTL_ADDR=$grpc
"
fi
cat >"$dir/banner.txt" <<TEXT

  Fulfillment service (development setup; config: $dir/config.yaml,
  written again by every make run: override with FULFILLMENT_* variables;
  the dev listener's and the fake bank's addresses with FULFILLCTL_LISTEN_ADDR, FAKEBANK_LISTEN_ADDR)
    gRPC      $grpc   (reflection on: grpcurl -plaintext $grpc list)
    REST      http://$http/v1/orders
    OpenAPI   http://$http/openapi.json
    health    http://$http/healthz   http://$http/readyz
    console   http://$http/console/   (sign in with the token in $dir/admin.token)
$addr
  Create an order, then read it back (in another terminal):

    TOKEN=\$(cat $dir/checkout.token)
    curl -sS -H "Authorization: Bearer \$TOKEN" http://$http/v1/orders -d '{
      "org_id": "org_demo", "environment": "test", "merchant_order_id": "demo-1",
      "lines": [{"sku": "pro-license", "kind": "license", "quantity": 1,
                 "unit_price": {"currency": "USD", "minor_units": 2500}}],
      "settlement": {"token": "USDT", "network": "TRON", "amount": "25.000000"}}'
    curl -sS -H "Authorization: Bearer \$TOKEN" "http://$http/v1/orders?org_id=org_demo&merchant_order_id=demo-1"

  Pay it: a signed Yolfi payment.confirmed on the test endpoint, then see the order fulfilled with its license:

    .cache/fulfillctl webhook send --url http://$ingest/webhooks/yolfi-test --secret-file $dir/yolfi-test.secret \\
      --org org_demo --merchant-order-id demo-1 --amount 25.000000 --test
    curl -sS -H "Authorization: Bearer \$TOKEN" "http://$http/v1/orders?org_id=org_demo&merchant_order_id=demo-1"
    FULFILLCTL_TOKEN_FILE=$dir/checkout.token .cache/fulfillctl orders get <order id> --json   # license key, timeline

  Deliveries to other systems (the outbox): in a third terminal, run a local receiver,

    .cache/fulfillctl listen --addr $listener --secret-file $dir/outbox.secret

  then create and pay an order with an external line naming the dev-listener destination. The
  receiver prints the signed fulfillment.requested delivery, then order.fulfilled once it answered 200
  (with --status 500 it answers 500 and the service retries; Ctrl-C it and deliveries wait):

    curl -sS -H "Authorization: Bearer \$TOKEN" http://$http/v1/orders -d '{
      "org_id": "org_demo", "environment": "test", "merchant_order_id": "demo-2",
      "lines": [{"sku": "box", "kind": "external", "quantity": 1, "destination": "dev-listener",
                 "unit_price": {"currency": "USD", "minor_units": 2500}}],
      "settlement": {"token": "USDT", "network": "TRON", "amount": "25.000000"}}'
    .cache/fulfillctl webhook send --url http://$ingest/webhooks/yolfi-test --secret-file $dir/yolfi-test.secret \\
      --org org_demo --merchant-order-id demo-2 --amount 25.000000 --test
    curl -sS -H "Authorization: Bearer \$(cat $dir/admin.token)" "http://$http/v1/outbox/messages"

  The T-Bank path: run the fake bank in another terminal (the terminal password is the dev one),

    FAKEBANK_PASSWORD=\$(cat $dir/tbank-test.password) go run ./rig/cmd/fakebank --listen $bank --terminal-key DevTerminalDEMO

  then create an order priced in RUB, start its payment (the service calls the bank's Init and returns
  the payment page), and pay it (open payment_url in a browser, or POST to it). The bank notifies the
  tbank-test endpoint (AUTHORIZED, then CONFIRMED) and the order is fulfilled. Start it again: the same
  attempt comes back, with no second payment at the bank. Run the bank with --drop and the status poller
  fulfils the order from the bank's GetState instead, 30 s after the start:

    curl -sS -H "Authorization: Bearer \$TOKEN" http://$http/v1/orders -d '{
      "org_id": "org_demo", "environment": "test", "merchant_order_id": "demo-3",
      "lines": [{"sku": "pro-license", "kind": "license", "quantity": 1,
                 "unit_price": {"currency": "RUB", "minor_units": 19900}}]}'
    curl -sS -H "Authorization: Bearer \$TOKEN" http://$http/v1/orders/<order id>/payments -d '{"endpoint_id": "tbank-test"}'
    curl -sS -X POST <payment_url>
    curl -sS -H "Authorization: Bearer \$TOKEN" "http://$http/v1/orders?org_id=org_demo&merchant_order_id=demo-3"

  Subscriptions: an order with a subscription line pays the first period of the customer's subscription
  to the plan (the payment names the provider's subscription); a payment naming the subscription and no
  order renews it, once however often it is delivered; CheckAccess says whether the customer has access,
  until when and why:

    curl -sS -H "Authorization: Bearer \$TOKEN" http://$http/v1/orders -d '{
      "org_id": "org_demo", "environment": "test", "merchant_order_id": "demo-4",
      "lines": [{"sku": "pro", "kind": "subscription", "quantity": 1, "plan_id": "pro-monthly",
                 "account_ref": "user_42", "unit_price": {"currency": "USD", "minor_units": 900}}],
      "settlement": {"token": "USDT", "network": "TRON", "amount": "9.000000"}}'
    .cache/fulfillctl webhook send --url http://$ingest/webhooks/yolfi-test --secret-file $dir/yolfi-test.secret \\
      --org org_demo --merchant-order-id demo-4 --subscription-id sub_demo --amount 9.000000 --test
    curl -sS -H "Authorization: Bearer \$TOKEN" \\
      "http://$http/v1/access?org_id=org_demo&environment=test&customer_ref=user_42&plan_id=pro-monthly"
    # the next month's renewal, delivered twice: one more period
    .cache/fulfillctl webhook send --url http://$ingest/webhooks/yolfi-test --secret-file $dir/yolfi-test.secret \\
      --org org_demo --subscription-id sub_demo --invoice-id inv_demo_2 --amount 9.000000 --test --repeat 2
    # cancelled: access stays until the paid period ends, then the sweeper ends it
    .cache/fulfillctl webhook send --url http://$ingest/webhooks/yolfi-test --secret-file $dir/yolfi-test.secret \\
      --org org_demo --type subscription.cancelled --subscription-id sub_demo --test
    curl -sS -H "Authorization: Bearer \$TOKEN" "http://$http/v1/subscriptions?org_id=org_demo"

  Ctrl-C stops the service and its PostgreSQL.

TEXT
