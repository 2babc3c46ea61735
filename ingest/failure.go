package ingest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"syscall"
)

// DescribeFailure says why a call to a provider's API failed, in words safe
// to show and to store: a transport error names the provider's address (its
// internal URL, host and port), so it is told by its kind only; anything
// else is the adapter's account of the answer, which holds no address.
// Starting a payment (the API's answer) and polling one (the poll's
// record, its poll_failing item) both say it so.
func DescribeFailure(err error) string {
	var urlErr *url.Error
	if !errors.As(err, &urlErr) {
		return err.Error()
	}
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
