package server_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// rawCodec sends a request's bytes as they are (a rawMessage) and keeps an
// answer's: what a caller with another schema, or a broken encoder, sends.
type rawCodec struct{}

type rawMessage []byte

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*rawMessage))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*rawMessage) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// A request that is not the method's message is the caller's error, not the
// service's: INVALID_ARGUMENT saying why, after authentication (a caller
// without a token is UNAUTHENTICATED whatever it sent), logged as a refused
// call, never an error of the service; the stream's request too. The same
// connection then serves a well-formed call.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	garbage := rawMessage{0xff, 0xff, 0xff, 0xff}
	notUTF8 := rawMessage{0x0a, 0x01, 0xff} // field 1 (order_id), one byte long: 0xff, not UTF-8
	for _, c := range []struct {
		name    string
		token   string
		req     rawMessage
		code    codes.Code
		message string
	}{
		{"not the message", tokOps, garbage, codes.InvalidArgument, "the request is not a valid fulfillment.v1.GetOrderRequest"},
		{"a string not UTF-8", tokReader, notUTF8, codes.InvalidArgument, "invalid UTF-8"},
		{"no token", "", garbage, codes.Unauthenticated, ""},
	} {
		ctx := withToken(c.token)
		var reply rawMessage
		err := ts.conn.Invoke(ctx, fulfillmentv1.FulfillmentService_GetOrder_FullMethodName, &c.req, &reply, grpc.ForceCodecV2(rawCodec{}))
		if status.Code(err) != c.code || !strings.Contains(status.Convert(err).Message(), c.message) {
			t.Errorf("%s: %v, want %v containing %q", c.name, err, c.code, c.message)
		}
	}

	stream, err := ts.conn.NewStream(withToken(tokOps), &grpc.StreamDesc{ServerStreams: true},
		fulfillmentv1.FulfillmentService_WatchOrderEvents_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.SendMsg(&garbage); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var event rawMessage
	err = stream.RecvMsg(&event)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "fulfillment.v1.WatchOrderEventsRequest") {
		t.Errorf("the stream's request: %v, want InvalidArgument naming its message", err)
	}

	if _, err := ts.client.GetOrder(withToken(tokOps), &fulfillmentv1.GetOrderRequest{OrderId: "00000000-0000-0000-0000-000000000000"}); status.Code(err) != codes.NotFound {
		t.Errorf("a well-formed call after them: %v, want NotFound", err)
	}
	logs := ts.logs.String()
	if strings.Contains(logs, `"level":"ERROR"`) || strings.Contains(logs, "Internal") {
		t.Errorf("an undecodable request was logged as the service's error:\n%s", logs)
	}
	if !strings.Contains(logs, `"code":"InvalidArgument"`) {
		t.Errorf("the refused calls were not logged:\n%s", logs)
	}
}
