package server

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// errorCodes maps domain sentinels to gRPC codes. It is the only such table:
// the REST gateway derives HTTP codes from the gRPC code (grpc-gateway's
// runtime.HTTPStatusFromCode), so 404, 409, 503 follow from here.
var errorCodes = []struct {
	err  error
	code codes.Code
}{
	{fulfillment.ErrNotFound, codes.NotFound},
	{fulfillment.ErrConflict, codes.AlreadyExists},
	{fulfillment.ErrUnavailable, codes.Unavailable},
	{fulfillment.ErrFailedPrecondition, codes.FailedPrecondition},
	{fulfillment.ErrStartBusy, codes.Aborted},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// toStatus turns an error from the domain or storage into the status a caller
// sees. Known errors carry their own message, written for callers; anything
// else is logged in full and reported as "internal error", so that no driver
// message, query or secret reaches a caller.
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (auth, request decoding)
	}
	var ve *fulfillment.ValidationError
	if errors.As(err, &ve) {
		return invalidArgument(ve)
	}
	for _, e := range errorCodes {
		if errors.Is(err, e.err) {
			if e.code == codes.Unavailable {
				log.WarnContext(ctx, "dependency unavailable", "error", err)
				return databaseUnavailable()
			}
			return status.Error(e.code, err.Error())
		}
	}
	log.ErrorContext(ctx, "internal error", "error", err)
	return status.Error(codes.Internal, "internal error")
}

// databaseUnavailable is the status of a call that failed for want of the
// database (fulfillment.ErrUnavailable), with an ErrorInfo saying so.
func databaseUnavailable() error {
	st := status.New(codes.Unavailable, "service temporarily unavailable (its database does not answer), retry later")
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: fulfillment.ReasonDatabaseUnavailable, Domain: "fulfillment"}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// invalidArgument builds INVALID_ARGUMENT with a google.rpc.BadRequest
// listing every field violation.
func invalidArgument(ve *fulfillment.ValidationError) error {
	br := &errdetails.BadRequest{}
	for _, v := range ve.Violations {
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{
			Field:       v.Field,
			Description: v.Description,
		})
	}
	st, err := status.New(codes.InvalidArgument, ve.Error()).WithDetails(br)
	if err != nil {
		return status.Error(codes.InvalidArgument, ve.Error())
	}
	return st.Err()
}
