// Package buildinfo says which build of the service is running: its
// version, the commit it was built from, and when it was built, for
// --version and the fulfillment_build_info metric.
//
// The build sets them (make build and make run do, from git):
//
//	go build -ldflags "-X github.com/fulfillplatform/fulfillment/internal/buildinfo.version=v1.2.3 \
//	    -X github.com/fulfillplatform/fulfillment/internal/buildinfo.commit=$(git rev-parse HEAD) \
//	    -X github.com/fulfillplatform/fulfillment/internal/buildinfo.commitTime=2026-12-01T11:58:00Z \
//	    -X github.com/fulfillplatform/fulfillment/internal/buildinfo.builtAt=2026-12-01T12:00:00Z"
//
// Without them, the commit and its time are what the Go toolchain recorded
// (debug.ReadBuildInfo: a build inside a git checkout, unless -buildvcs=false).
// A build that sets the commit sets its time too, or has none: the
// toolchain's would be of whatever checkout it ran in.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set by the linker (-X); see the package comment.
var (
	version    string
	commit     string
	commitTime string
	builtAt    string
)

// Info describes one build.
type Info struct {
	Version    string // "devel" unless the build set one
	Commit     string // the git commit, with "-modified" when the tree had changes; "unknown" outside git
	CommitTime string // RFC 3339, "" when unknown
	BuiltAt    string // RFC 3339, "unknown" unless the build set it
	Go         string // the toolchain's version
}

// Read returns the running binary's build.
func Read() Info {
	i := Info{Version: version, Commit: "unknown", BuiltAt: builtAt, Go: runtime.Version()}
	if commit != "" {
		i.Commit = commit
	}
	if i.Version == "" {
		i.Version = "devel"
	}
	if i.BuiltAt == "" {
		i.BuiltAt = "unknown"
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	if i.Version == "devel" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		i.Version = bi.Main.Version
	}
	if commit != "" {
		i.Commit, i.CommitTime = commit, commitTime
		return i
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.time":
			i.CommitTime = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && i.Commit != "unknown" {
		i.Commit += "-modified"
	}
	return i
}

// String is the line --version prints, after the program's name.
func (i Info) String() string {
	commit := i.Commit
	if i.CommitTime != "" {
		commit += " of " + i.CommitTime
	}
	return fmt.Sprintf("%s (commit %s, built %s, %s)", i.Version, commit, i.BuiltAt, i.Go)
}
