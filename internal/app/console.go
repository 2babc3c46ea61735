package app

import (
	"log/slog"
	"net/http"

	"google.golang.org/grpc"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/console"
	"github.com/fulfillplatform/fulfillment/storage"
)

// newConsole prepares the admin console, mounted by the server on its
// in-process connection; nil when console.enabled is false.
func newConsole(cfg *config.Config, store *storage.Store, log *slog.Logger) (func(*grpc.ClientConn) http.Handler, error) {
	cc := cfg.Console.WithDefaults()
	if !cc.On() {
		return nil, nil
	}
	c, err := console.New(console.Options{Tokens: cfg.Auth.Tokens, SessionTTL: cc.SessionTTL,
		TrustedProxies: cc.ProxyPrefixes(), Store: store, Log: log})
	if err != nil {
		return nil, err
	}
	return func(conn *grpc.ClientConn) http.Handler { return c.Mount(conn) }, nil
}
