package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		info Info
		want string
	}{
		{Info{Version: "v1.2.3", Commit: "abc", CommitTime: "2026-12-01T10:00:00Z", BuiltAt: "2026-12-01T11:00:00Z", Go: "go1.26.8"},
			"v1.2.3 (commit abc of 2026-12-01T10:00:00Z, built 2026-12-01T11:00:00Z, go1.26.8)"},
		{Info{Version: "devel", Commit: "unknown", BuiltAt: "unknown", Go: "go1.26.8"},
			"devel (commit unknown, built unknown, go1.26.8)"},
	} {
		if got := c.info.String(); got != c.want {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}

func TestReadDefaults(t *testing.T) {
	t.Parallel()
	i := Read()
	if i.Version == "" || i.Commit == "" || i.BuiltAt == "" || i.Go != runtime.Version() {
		t.Errorf("Read() = %+v: every field set, Go the toolchain's", i)
	}
	if !strings.HasPrefix(i.String(), i.Version+" (commit ") {
		t.Errorf("String() = %q", i.String())
	}
}
