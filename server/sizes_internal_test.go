package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// A response over the send bound is INTERNAL, not the transport's
// RESOURCE_EXHAUSTED, which tells clients to retry the same call.
func TestLimitResponse(t *testing.T) {
	t.Parallel()
	big := &fulfillmentv1.ListOrdersResponse{NextPageToken: strings.Repeat("x", 2048)}
	small := &fulfillmentv1.ListOrdersResponse{NextPageToken: "x"}
	intercept := limitResponse(1024, slog.New(slog.DiscardHandler))
	info := &grpc.UnaryServerInfo{FullMethod: "/fulfillment.v1.FulfillmentService/ListOrders"}
	for _, tc := range []struct {
		resp *fulfillmentv1.ListOrdersResponse
		want codes.Code
	}{{small, codes.OK}, {big, codes.Internal}} {
		_, err := intercept(context.Background(), nil, info, func(context.Context, any) (any, error) { return tc.resp, nil })
		if status.Code(err) != tc.want {
			t.Errorf("a %d-byte response: %v, want %s", len(tc.resp.GetNextPageToken()), err, tc.want)
		}
	}
}

// The REST gateway never answers 429 for an answer it could not receive:
// a RESOURCE_EXHAUSTED from gRPC (a message over a size bound) is 500.
func TestGatewayErrorNever429(t *testing.T) {
	t.Parallel()
	s := &Server{log: slog.New(slog.DiscardHandler)}
	w := httptest.NewRecorder()
	err := status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)")
	s.gatewayError(context.Background(), runtime.NewServeMux(), restMarshaler, w, httptest.NewRequest("GET", "/v1/orders", http.NoBody), err)
	body, _ := io.ReadAll(w.Result().Body)
	if w.Code != http.StatusInternalServerError || strings.Contains(string(body), "larger than max") {
		t.Errorf("status %d %s, want 500 without the transport's message", w.Code, body)
	}
}
