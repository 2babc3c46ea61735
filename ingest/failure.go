package ingest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"
)

// DescribeFailure says why a call to a provider's API failed, in words safe
// to show and to store: a transport error names the provider's address (its
// internal URL, host and port), so it is told by its kind only — the whole
// failure when the request failed, the transport error's part of it when
// the answer broke off while it was read; anything else is the adapter's
// account of the answer, which holds no address. Starting a payment (the
// API's answer) and polling one (the poll's record, its poll_failing item)
// both say it so.
func DescribeFailure(err error) string {
	if _, ok := errors.AsType[*url.Error](err); ok {
		return transportKind(err)
	}
	if op, ok := errors.AsType[*net.OpError](err); ok {
		if s, addr := err.Error(), op.Error(); strings.Contains(s, addr) {
			return strings.Replace(s, addr, transportKind(err), 1)
		}
		return transportKind(err)
	}
	return err.Error()
}

// transportKind is the kind of transport failure err is, without the
// addresses its text holds.
func transportKind(err error) string {
	var (
		netErr net.Error
		dnsErr *net.DNSError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "the call was canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection lost"
	case errors.As(err, &dnsErr):
		return "its host name did not resolve"
	}
	return "transport error"
}
