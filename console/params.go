package console

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// inputTimeLayouts are the forms a time filter is accepted in: what a
// datetime-local input sends (minutes, or seconds), and RFC 3339. A time
// without a zone is UTC, like every time the console shows.
var inputTimeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano}

// timeParam reads the time filter key of v; absent is nil.
func timeParam(v url.Values, key string) (*timestamppb.Timestamp, error) {
	s := strings.TrimSpace(v.Get(key))
	if s == "" {
		return nil, nil
	}
	for _, layout := range inputTimeLayouts {
		t, err := time.ParseInLocation(layout, s, time.UTC)
		switch {
		case err != nil:
			continue
		case t.Nanosecond() != 0:
			// Its pages carry a filter on (the next page's link, a
			// re-drive's confirmation) to the second: a fraction would be
			// lost on the way, and the API refuses a page token whose
			// filter changed.
			return nil, fmt.Errorf("%s: %q has a fraction of a second: the console's times are to the second", key, s)
		}
		return timestamppb.New(t), nil
	}
	return nil, fmt.Errorf("%s: %q is not a time: write it as 2026-12-01T12:00 (UTC)", key, s)
}

// inputTime renders t for a datetime-local input (UTC, to the second).
func inputTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format("2006-01-02T15:04:05")
}
