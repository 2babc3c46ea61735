package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	encproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A request grpc-go cannot decode (bytes that are not the method's message,
// a string field that is not UTF-8) is answered INTERNAL by grpc-go itself,
// before any interceptor has run: the caller is told the service failed, the
// call is logged and counted as a server error, and nobody checked who sent
// it. requestCodec, the server's codec, decodes as proto's does but lets such
// a call through with the failure noted against its message; the interceptors
// below answer it INVALID_ARGUMENT once the caller is authenticated (an
// unknown caller still gets UNAUTHENTICATED), and no handler ever sees the
// half-decoded message.
type requestCodec struct {
	encoding.CodecV2
	undecodable sync.Map // the message (a pointer) → why it could not be decoded
}

func newRequestCodec() *requestCodec {
	return &requestCodec{CodecV2: encoding.GetCodecV2(encproto.Name)}
}

// Unmarshal decodes data into v; a failure is noted for take, not returned.
func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if err := c.CodecV2.Unmarshal(data, v); err != nil {
		c.undecodable.Store(v, err)
	}
	return nil
}

// take returns the INVALID_ARGUMENT answer for a message that could not be
// decoded (nil for one that was), and forgets it.
func (c *requestCodec) take(v any) error {
	err, ok := c.undecodable.LoadAndDelete(v)
	if !ok {
		return nil
	}
	name := "the method's request message"
	if m, ok := v.(proto.Message); ok {
		name = string(proto.MessageName(m))
	}
	return status.Errorf(codes.InvalidArgument, "the request is not a valid %s: %v", name, err)
}

type undecodableKey struct{}

// noteUndecodable takes the decoding failure of a unary call's request, if
// any, into its context, where refuseUndecodable finds it: it runs before
// authentication, so that a failure is taken whatever authentication answers.
func (c *requestCodec) noteUndecodable(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.take(req); err != nil {
		ctx = context.WithValue(ctx, undecodableKey{}, err)
	}
	return handler(ctx, req)
}

// refuseUndecodable answers a unary call whose request could not be decoded,
// after authentication.
func refuseUndecodable(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err, ok := ctx.Value(undecodableKey{}).(error); ok {
		return nil, err
	}
	return handler(ctx, req)
}

// refuseUndecodableStream makes a stream's RecvMsg answer a message that
// could not be decoded; it runs after authentication, the handler receiving
// through it.
func (c *requestCodec) refuseUndecodableStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &decodedStream{ServerStream: ss, codec: c})
}

type decodedStream struct {
	grpc.ServerStream
	codec *requestCodec
}

func (s *decodedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.codec.take(m)
}
