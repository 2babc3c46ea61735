package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
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
	} {
		got := DescribeFailure(tc.err)
		if got != tc.want || strings.Contains(got, "10.0.0.7") {
			t.Errorf("DescribeFailure(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
