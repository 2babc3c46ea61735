package server

import (
	"crypto/tls"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Config is what the server acts on: where it listens and within which
// bounds, who may call it, and the names its requests may use. The process
// that runs it builds it once from the service's configuration.
type Config struct {
	// GRPCAddr and HTTPAddr are the listeners' addresses (host:port; port 0
	// picks a free one).
	GRPCAddr, HTTPAddr string
	// GRPC and HTTP bound the listeners; their zero fields are the defaults.
	GRPC config.GRPC
	HTTP config.HTTP
	// TLS, when set, terminates TLS on both listeners.
	TLS *tls.Config
	// Tokens are the bearer tokens callers authenticate with.
	Tokens []config.Token
	// Endpoints are the webhook endpoints RecordEvent accepts events of,
	// by id.
	Endpoints map[string]fulfillment.Endpoint
	// Plans are the subscription plans lines and subscriptions may name.
	Plans fulfillment.Plans
	// Destinations are the outbox destinations, in the order they are
	// listed; external order lines name one of them.
	Destinations []config.Destination
}
