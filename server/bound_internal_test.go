package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// A unary call is handled within grpc.max_call_duration: without a
// deadline of its own, or with a later one, it gets that one; an earlier
// one of the caller's stands.
func TestBoundUnaryGivesEveryCallADeadline(t *testing.T) {
	t.Parallel()
	const limit = time.Minute
	left := func(ctx context.Context) time.Duration {
		var got time.Duration
		_, _ = boundUnary(limit)(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			d, ok := ctx.Deadline()
			if !ok {
				t.Fatal("a call handled without a deadline")
			}
			got = time.Until(d)
			return nil, nil
		})
		return got
	}
	if got := left(context.Background()); got <= 0 || got > limit {
		t.Errorf("a call without a deadline has %v left, want at most %v", got, limit)
	}
	later, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if got := left(later); got > limit {
		t.Errorf("a call with an hour has %v left, want at most %v", got, limit)
	}
	sooner, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if got := left(sooner); got > time.Second {
		t.Errorf("a call with a second has %v left, want its own second", got)
	}
}
