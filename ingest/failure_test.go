package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
)

func TestDescribeFailure(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error {
		return fmt.Errorf("asking: %w", &url.Error{Op: "Post", URL: "http://10.0.0.7:8443/v2/GetState", Err: err})
	}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{wrap(syscall.ECONNREFUSED), "connection refused"},
		{wrap(io.EOF), "connection lost"},
		{wrap(context.DeadlineExceeded), "timed out"},
		{wrap(errors.New("tls: bad certificate")), "transport error"},
		{errors.New("the bank answered ErrorCode 9999: unknown terminal"), "the bank answered ErrorCode 9999: unknown terminal"},
		// The answer broke off while it was read: no url.Error, and the
		// read's error names both ends of the connection.
		{fmt.Errorf("tbank Init: outcome unknown: HTTP 200: reading the answer: %w", &net.OpError{Op: "read", Net: "tcp",
			Source: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 47564}, Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 8443},
			Err: os.NewSyscallError("read", syscall.ECONNRESET)}),
			"tbank Init: outcome unknown: HTTP 200: reading the answer: connection lost"},
	} {
		got := DescribeFailure(tc.err)
		if got != tc.want || strings.Contains(got, "10.0.0.") {
			t.Errorf("DescribeFailure(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
