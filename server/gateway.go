package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Readiness reports whether the service can do its work.
type Readiness interface {
	// Ping checks the database answers.
	Ping(ctx context.Context) error
	// SchemaVersion reports applied and latest migration versions.
	SchemaVersion(ctx context.Context) (applied, latest int32, err error)
}

// newHTTPHandler serves the REST gateway (translating to gRPC over conn, so
// that REST calls pass the same interceptors: auth, logging, recovery), the
// OpenAPI document, and the health endpoints.
func newHTTPHandler(ctx context.Context, conn *grpc.ClientConn, ready Readiness, metrics http.Handler, log *slog.Logger) (http.Handler, error) {
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			MarshalOptions: protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			// A misspelt field is an error, not silently dropped.
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		runtime.WithIncomingHeaderMatcher(func(key string) (string, bool) {
			if strings.EqualFold(key, requestIDHeader) {
				return requestIDHeader, true
			}
			return runtime.DefaultHeaderMatcher(key)
		}),
		// The HTTP layer already echoes X-Request-Id; no gRPC metadata leaks out.
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
	)
	if err := fulfillmentv1.RegisterFulfillmentServiceHandler(ctx, gw, conn); err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/v1/", gw)
	mux.HandleFunc("GET /openapi.json", serveOpenAPI)
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := ready.Ping(ctx); err != nil {
			log.WarnContext(ctx, "not ready: database unreachable", "error", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "database unreachable"})
			return
		}
		applied, latest, err := ready.SchemaVersion(ctx)
		if err != nil {
			log.WarnContext(ctx, "not ready: reading schema version", "error", err)
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "schema version unknown"})
			return
		}
		if applied != latest {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{
				"status": "unavailable", "reason": "migrations pending: run fulfillmentd migrate",
				"schema_version": applied, "latest_version": latest,
			})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "schema_version": applied})
	})
	return withRequestID(mux), nil
}

// withRequestID gives every HTTP request an id (the caller's X-Request-Id
// when sane), echoed in the response and forwarded to gRPC.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newRequestID()
			r.Header.Set("X-Request-Id", id)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
