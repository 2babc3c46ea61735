package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testDir returns a fresh folder under os.TempDir() that the server user can
// reach (t.TempDir's parent is private), removed when the test ends.
func testDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgcluster-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if !Accessible(dir) {
		t.Fatalf("Accessible(%s) = false", dir)
	}
	return dir
}

// startCluster starts a cluster in dir, skipping the test when PostgreSQL
// is not installed; the cluster is stopped when the test ends.
func startCluster(t *testing.T, ctx context.Context, dir string, log *bytes.Buffer) *Cluster {
	t.Helper()
	c, err := Start(ctx, Options{Dir: dir, Log: log})
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// execSQL runs sql in database db of c.
func execSQL(t *testing.T, ctx context.Context, c *Cluster, db, sql string) error {
	t.Helper()
	cn, err := dial(ctx, net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())), "postgres", db)
	if err != nil {
		return err
	}
	defer func() { _ = cn.Close(ctx) }()
	_, err = cn.Exec(ctx, sql)
	return err
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := testDir(t)
	var log bytes.Buffer
	c := startCluster(t, ctx, dir, &log)
	if !strings.Contains(log.String(), "initializing cluster") {
		t.Errorf("first Start did not run initdb; log:\n%s", log.String())
	}

	// Plain TCP, then the wire protocol against the created database.
	nc, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port())))
	if err != nil {
		t.Fatalf("dialing server: %v", err)
	}
	_ = nc.Close()
	if err := execSQL(t, ctx, c, "fulfillment", "CREATE TABLE marker (id int)"); err != nil {
		t.Fatalf("using database fulfillment: %v", err)
	}

	// The real client, when installed, through the URL we hand out.
	binDir, _ := FindBinaries()
	psql := filepath.Join(binDir, "psql")
	if _, err := os.Stat(psql); err != nil {
		psql, _ = exec.LookPath("psql")
	}
	if psql != "" {
		out, err := exec.CommandContext(ctx, psql, c.URL("fulfillment"), "-Atc", "select 1").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("psql select 1: %v: %s", err, out)
		}
	}

	// A crash, then a restart on the same port with crash recovery.
	port := c.Port()
	if err := c.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := execSQL(t, ctx, c, "postgres", "SELECT 1"); err == nil {
		t.Fatal("server still answers after Kill")
	}
	if err := c.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if c.Port() != port {
		t.Errorf("Restart moved the port from %d to %d", port, c.Port())
	}
	if err := execSQL(t, ctx, c, "fulfillment", "SELECT * FROM marker"); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// A second Start on the same folder reuses the cluster.
	log.Reset()
	c2 := startCluster(t, ctx, dir, &log)
	if strings.Contains(log.String(), "initializing cluster") || !strings.Contains(log.String(), "reusing cluster") {
		t.Errorf("second Start did not reuse the cluster; log:\n%s", log.String())
	}
	if err := execSQL(t, ctx, c2, "fulfillment", "SELECT * FROM marker"); err != nil {
		t.Errorf("data lost across Start: %v", err)
	}
	if err := c2.Restart(ctx); err != nil { // while running: stop, then start
		t.Fatalf("Restart of a running cluster: %v", err)
	}
	if err := execSQL(t, ctx, c2, "fulfillment", "SELECT * FROM marker"); err != nil {
		t.Errorf("after second Restart: %v", err)
	}
	if got, want := c2.URL("fulfillment"), "postgres://postgres@127.0.0.1:"+strconv.Itoa(c2.Port())+"/fulfillment?sslmode=disable"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
}

func TestStartPortInUse(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	port := ln.Addr().(*net.TCPAddr).Port
	c, err := Start(context.Background(), Options{Dir: testDir(t), Port: port})
	if errors.Is(err, ErrNoBinaries) {
		t.Skip(err)
	}
	if err == nil {
		_ = c.Stop() // the test fails below anyway
		t.Fatal("Start succeeded on a port in use")
	}
	if !strings.Contains(err.Error(), "already in use") {
		t.Errorf("unclear error: %v", err)
	}
}

func TestAccessible(t *testing.T) {
	t.Parallel()
	if _, err := FindBinaries(); errors.Is(err, ErrNoBinaries) {
		t.Skip(err) // no postgres OS user either
	}
	a, err := serverAccount()
	if err != nil {
		t.Fatal(err)
	}
	if !a.switchUser {
		t.Skip("only meaningful as root, where the server runs as user postgres")
	}
	closed := t.TempDir() // mode 0700, owned by root
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(closed, "a", "b")
	if Accessible(dir) {
		t.Errorf("Accessible(%s) = true under a 0700 folder", dir)
	}
	err = checkAccess(dir, a)
	if !errors.Is(err, ErrInaccessible) || !strings.Contains(err.Error(), closed) {
		t.Errorf("checkAccess error does not name %s: %v", closed, err)
	}
	if !Accessible(filepath.Join(os.TempDir(), "pgcluster-none", "x")) {
		t.Errorf("a missing folder under %s should be accessible", os.TempDir())
	}
}
