package pgcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrNoBinaries is returned when no PostgreSQL server installation can be found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries not found: install them (Debian: apt-get install postgresql-15) or set DATABASE_URL")

// requiredBinaries must all be present in a bin folder for FindBinaries to accept it.
var requiredBinaries = []string{"initdb", "pg_ctl", "postgres"}

// FindBinaries returns the folder holding the PostgreSQL server binaries
// (initdb, pg_ctl, postgres). It tries, in order: the PG_BINDIR environment
// variable, the folder of `initdb` found on PATH (symlinks resolved, so
// Debian's /usr/local/bin links lead to the real folder), and the newest
// /usr/lib/postgresql/*/bin. The error wraps ErrNoBinaries when none fits.
func FindBinaries() (binDir string, err error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		// An explicit setting that is wrong should be reported, not silently skipped.
		if missing := missingBinary(dir); missing != "" {
			return "", fmt.Errorf("checking PG_BINDIR=%s: no %s there: %w", dir, missing, ErrNoBinaries)
		}
		return dir, nil
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			path = resolved
		}
		if dir := filepath.Dir(path); missingBinary(dir) == "" {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.SliceStable(dirs, func(i, j int) bool { return majorVersion(dirs[i]) > majorVersion(dirs[j]) })
	for _, dir := range dirs {
		if missingBinary(dir) == "" {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

// missingBinary returns the first required binary not executable in dir, or "".
func missingBinary(dir string) string {
	for _, name := range requiredBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return name
		}
	}
	return ""
}

// majorVersion parses the version folder of /usr/lib/postgresql/VERSION/bin
// ("15", "9.6"); unparsable names sort last.
func majorVersion(binDir string) float64 {
	v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	if err != nil {
		return -1
	}
	return v
}
