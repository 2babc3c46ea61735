package pgcluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
)

// ErrInaccessible is wrapped by Start when the OS user the server runs as
// cannot reach the data folder (an ancestor folder is not searchable by it).
var ErrInaccessible = errors.New("data folder is not reachable by the server's OS user")

// account is the OS user that initdb and postgres run as: the `postgres`
// user when we are root (both refuse to run as root), else ourselves.
type account struct {
	name       string
	uid        uint32
	gid        uint32
	groups     []uint32 // supplementary groups
	switchUser bool     // true when the children must switch to this user
}

// serverAccount looks up the account the server will run as.
func serverAccount() (*account, error) {
	if os.Geteuid() != 0 {
		a := &account{name: strconv.Itoa(os.Geteuid()), uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}
		if u, err := user.Current(); err == nil {
			a.name = u.Username
		}
		gids, _ := os.Getgroups()
		for _, g := range gids {
			a.groups = append(a.groups, uint32(g))
		}
		return a, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("looking up OS user postgres (needed to run the server as root; the postgresql package creates it): %w", err)
	}
	a := &account{name: u.Username, switchUser: true}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("parsing ids of OS user postgres: %w", err)
	}
	a.uid, a.gid = uint32(uid), uint32(gid)
	gids, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("listing groups of OS user postgres: %w", err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			a.groups = append(a.groups, uint32(n))
		}
	}
	return a, nil
}

// sysProcAttr returns the process attributes for a child running as a: its
// own process group, so a Ctrl-C meant for the foreground command does not
// reach it, and the account's credentials when we are root.
func (a *account) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if a.switchUser {
		attr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
	}
	return attr
}

// canSearch reports whether a may traverse the folder described by fi,
// following the POSIX rule: owner bits for the owner, else group bits for a
// group member, else the "other" bits.
func (a *account) canSearch(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || a.uid == 0 {
		return true
	}
	perm := fi.Mode().Perm()
	switch {
	case st.Uid == a.uid:
		return perm&0o100 != 0
	case st.Gid == a.gid || slices.Contains(a.groups, st.Gid):
		return perm&0o010 != 0
	default:
		return perm&0o001 != 0
	}
}

// Accessible reports whether the OS user the server runs as (postgres when we
// are root) can reach dir, so Start may use it as Options.Dir. Every existing
// ancestor of dir must be searchable by that user; dir itself and missing
// ancestors do not matter, as Start creates them traversable and hands dir to
// that user. Callers use it to pick a fallback, e.g. under os.TempDir().
func Accessible(dir string) bool {
	a, err := serverAccount()
	if err != nil {
		return false
	}
	return checkAccess(dir, a) == nil
}

// checkAccess returns an error wrapping ErrInaccessible that names the first
// folder on the way to dir that a cannot search.
func checkAccess(dir string, a *account) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", dir, err)
	}
	// Find the deepest existing folder and resolve symlinks, so the folders
	// checked are the ones really traversed.
	p := abs
	for {
		if _, err := os.Stat(p); err == nil {
			break
		}
		p = filepath.Dir(p)
	}
	resolved, err := filepath.EvalSymlinks(p)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", p, err)
	}
	if p == abs {
		resolved = filepath.Dir(resolved) // dir itself will belong to a
	}
	for q := resolved; ; q = filepath.Dir(q) {
		fi, err := os.Stat(q)
		if err != nil {
			return fmt.Errorf("checking %s: %w", q, err)
		}
		if !a.canSearch(fi) {
			return fmt.Errorf("checking %s: OS user %s cannot enter %s (mode %v); choose a data folder elsewhere, e.g. under %s: %w",
				abs, a.name, q, fi.Mode().Perm(), os.TempDir(), ErrInaccessible)
		}
		if q == filepath.Dir(q) {
			return nil
		}
	}
}

// prepareDir creates dir (and missing ancestors, mode 0755 whatever the
// umask, so the server user can traverse them) and, when switching users,
// hands dir to the server user.
func prepareDir(dir string, a *account) error {
	var missing []string
	for p := dir; ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			break
		}
		missing = append(missing, p)
	}
	for _, p := range slices.Backward(missing) {
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("creating %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return fmt.Errorf("setting mode of %s: %w", p, err)
		}
	}
	return a.chown(dir)
}

// chown gives path to a when the server runs as another user.
func (a *account) chown(path string) error {
	if !a.switchUser {
		return nil
	}
	if err := os.Lchown(path, int(a.uid), int(a.gid)); err != nil {
		return fmt.Errorf("handing %s to OS user %s: %w", path, a.name, err)
	}
	return nil
}

// chownTree gives the whole tree at root to a, unless root already belongs
// to a (the common case of a reused cluster, where walking it is wasted work).
func (a *account) chownTree(root string) error {
	if !a.switchUser {
		return nil
	}
	if fi, err := os.Lstat(root); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == a.uid {
			return nil
		}
	}
	return filepath.WalkDir(root, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return a.chown(path)
	})
}
