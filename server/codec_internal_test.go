package server

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// The failure noted against an undecodable request is taken by the first
// interceptor whatever the later ones answer, so a caller sending garbage
// without a token leaves nothing behind in the codec.
func TestUndecodableRequestLeavesNothingNoted(t *testing.T) {
	t.Parallel()
	c := newRequestCodec()
	req := &fulfillmentv1.GetOrderRequest{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer{0xff, 0xff}}, req); err != nil {
		t.Fatalf("Unmarshal returned %v; the failure is to be noted, not returned", err)
	}
	unauthenticated := func(context.Context, any) (any, error) {
		return nil, status.Error(codes.Unauthenticated, "no token")
	}
	_, err := c.noteUndecodable(context.Background(), req, &grpc.UnaryServerInfo{}, unauthenticated)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("got %v, want the later interceptor's answer", err)
	}
	c.undecodable.Range(func(k, _ any) bool {
		t.Errorf("%T still noted", k)
		return true
	})
	if err := c.take(req); err != nil {
		t.Errorf("taken twice: %v", err)
	}
}
