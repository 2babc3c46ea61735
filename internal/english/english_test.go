package english

import "testing"

// A count agrees with its noun; the count prints as the integer it is,
// whatever its type.
func TestPlural(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		got, want string
	}{
		{Plural(1, "line"), "1 line"},
		{Plural(0, "line"), "0 lines"},
		{Plural(2, "line"), "2 lines"},
		{Plural(-1, "line"), "-1 lines"},
		{Plural(int32(1), "older attempt"), "1 older attempt"},
		{Plural(int64(3), "more org"), "3 more orgs"},
		{Plural(uint64(1<<63), "item"), "9223372036854775808 items"},
		{Plural(1, "older delivery"), "1 older delivery"},
		{Plural(2, "older delivery"), "2 older deliveries"},
		{Plural(2, "day"), "2 days"},
		{Plural(2, "key"), "2 keys"},
		{Plural(2, "y"), "2 ys"},
		{Plural(2, "ledger movement"), "2 ledger movements"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}
