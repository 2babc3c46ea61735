package server

import (
	"slices"
	"testing"
	"time"
)

// A page token is bound to every filter of its listing: two listings that
// differ in any one part have different digests. Times (as Unix
// nanoseconds) all had one digest: a token of one time filter was taken
// with another.
func TestPageDigestTellsEveryPartApart(t *testing.T) {
	t.Parallel()
	a := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	b := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	digests := map[string][]any{}
	for _, parts := range [][]any{
		{"org_a", []string(nil), a},
		{"org_a", []string(nil), b},
		{"org_a", []string(nil), a + 1},
		{"org_a", []string{}, a},
		{"org_a", []string{"org_b"}, a},
		{"org_a", []string{"org_b", "org_c"}, a},
		{"org_a", []string{"org_b,org_c"}, a},
		{"org_b", []string(nil), a},
		{"org_a", "", a},
		{"org_a,", a},
		{"", "org_a", a},
	} {
		d := pageDigest(parts...)
		if other, ok := digests[d]; ok {
			t.Errorf("%#v and %#v have one digest", parts, other)
		}
		digests[d] = parts
	}
	if same := []any{"org_a", []string{"x"}, a}; pageDigest(same...) != pageDigest(slices.Clone(same)...) {
		t.Error("the same filters have two digests")
	}
}
