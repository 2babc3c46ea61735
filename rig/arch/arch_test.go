// Package arch_test checks the module's structure: the product never
// imports the test rig, and the domain package does no I/O.
package arch_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/fulfillplatform/fulfillment"

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
}

// list returns every package of the module with its non-test imports.
func list(t *testing.T) []pkg {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: the test runs from the wrong folder", len(pkgs))
	}
	return pkgs
}

// rig reports whether path is the test rig, or a suite of tests (which
// may use the rig): what is not shipped.
func rig(path string) bool {
	for _, p := range []string{"/rig", "/e2e", "/examples", "/docs"} {
		if path == module+p || strings.HasPrefix(path, module+p+"/") {
			return true
		}
	}
	return false
}

func TestProductDoesNotImportTheRig(t *testing.T) {
	t.Parallel()
	var product int
	for _, p := range list(t) {
		if rig(p.ImportPath) {
			continue
		}
		product++
		for _, imp := range p.Imports {
			if rig(imp) {
				t.Errorf("%s imports %s: product code must not depend on the test rig", p.ImportPath, imp)
			}
		}
	}
	if product < 15 {
		t.Fatalf("only %d product packages found", product)
	}
}

// ioPackages are what the domain must not import: the network, files,
// processes, databases, logs, RPC, metrics.
var ioPackages = []string{
	"net", "os", "syscall", "database/", "log", "io/fs", "io/ioutil", "embed", "plugin", "runtime/debug",
	"github.com/jackc/", "google.golang.org/grpc", "github.com/prometheus/", "go.opentelemetry.io/",
}

func TestDomainDoesNoIO(t *testing.T) {
	t.Parallel()
	found := false
	for _, p := range list(t) {
		if p.ImportPath != module+"/fulfillment" {
			continue
		}
		found = true
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				t.Errorf("fulfillment imports %s: the domain depends on no other package of the module", imp)
			}
			for _, bad := range ioPackages {
				if imp == bad || strings.HasPrefix(imp, strings.TrimSuffix(bad, "/")+"/") {
					t.Errorf("fulfillment imports %s: the domain does no I/O", imp)
				}
			}
		}
	}
	if !found {
		t.Fatal("package fulfillment not found")
	}
}

// config is data and its validation: it builds nothing, so it imports of
// the module only the domain and the secrets' formats.
func TestConfigIsData(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{module + "/fulfillment": true, module + "/outbox/stdwebhooks": true}
	found := false
	for _, p := range list(t) {
		if p.ImportPath != module+"/config" {
			continue
		}
		found = true
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") && !allowed[imp] {
				t.Errorf("config imports %s: the configuration is data and validation; build what it describes in internal/app", imp)
			}
		}
	}
	if !found {
		t.Fatal("package config not found")
	}
}
