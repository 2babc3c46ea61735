package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// An operator learns the keys from docs/configuration.md and
// config/example.yaml. Every key Load reads is named in one of them (the
// page's table, or the example as a key or in a comment beside one), every
// key the page's table names is one Load reads, and the page's environment
// overrides are the ones Load applies.
func TestDocsNameEveryKey(t *testing.T) {
	t.Parallel()
	page := readFile(t, "../docs/configuration.md")
	example := readFile(t, "example.yaml")

	var keys []string
	configKeys(reflect.TypeFor[Config](), "", &keys)

	// Deprecated names are read too, and the page says so by name.
	deprecated := func(k string) bool {
		return k == "worker" || strings.HasPrefix(k, "worker.") || k == "housekeeping.fulfilment_sla"
	}
	for _, name := range []string{"`worker`", "`housekeeping.fulfilment_sla`"} {
		if !strings.Contains(page, name) {
			t.Errorf("docs/configuration.md does not name the deprecated key %s", name)
		}
	}
	// Keys a shared struct gives a section that ignores them: Load must
	// say so (a warning naming the key) rather than read them silently.
	ignored := []string{"outbox.workers", "outbox.batch", "outbox.max_attempts", "status_poll.batch"}
	for _, k := range ignored {
		cfg, err := parse(nestedYAML(t, k), env(nil))
		if err != nil {
			t.Errorf("Load of %s: %v, want it loaded with a warning naming the key", k, err)
			continue
		}
		if w := cfg.Deprecated(); !slices.ContainsFunc(w, func(w string) bool { return strings.Contains(w, k+" is ignored") }) {
			t.Errorf("Load of %s: warnings %q, want one naming the key", k, w)
		}
	}

	inTable := tableKeys(page)
	inExample := exampleKeys(t, example)
	named := func(k string) bool { return inTable[k] || inExample[k] }
	for _, k := range keys {
		if deprecated(k) || slices.Contains(ignored, k) {
			continue
		}
		if !named(k) {
			t.Errorf("key %s is read by Load but named neither in docs/configuration.md's table nor in config/example.yaml", k)
		}
	}
	for k := range inTable {
		if !slices.Contains(keys, k) {
			t.Errorf("docs/configuration.md's table names %s, which Load does not read", k)
		}
	}

	// The environment overrides: the page's section lists exactly the
	// variables Load reads (the Env constants of config.go).
	_, section, _ := strings.Cut(page, "## Environment overrides")
	section, _, _ = strings.Cut(section, "\n## ")
	vars := envConstants(t)
	for _, v := range vars {
		if !strings.Contains(section, "`"+v+"`") {
			t.Errorf("docs/configuration.md's environment overrides do not name %s", v)
		}
	}
	for _, m := range regexp.MustCompile("`([A-Z][A-Z0-9_]+)`").FindAllStringSubmatch(section, -1) {
		if !slices.Contains(vars, m[1]) {
			t.Errorf("docs/configuration.md's environment overrides name %s, which Load does not read", m[1])
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// configKeys appends the dotted YAML keys of t (sections too; a list's
// items add no step) under prefix.
func configKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[Config]().PkgPath() {
		return
	}
	for f := range t.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
		case opts == "inline":
			configKeys(f.Type, prefix, out)
		default:
			*out = append(*out, prefix+name)
			configKeys(f.Type, prefix+name+".", out)
		}
	}
}

// nestedYAML is a file setting the dotted key to 1.
func nestedYAML(t *testing.T, key string) []byte {
	t.Helper()
	var v any = 1
	parts := strings.Split(key, ".")
	for i := len(parts) - 1; i >= 0; i-- {
		v = map[string]any{parts[i]: v}
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// tableKeys reads the first column of the page's key table: a cell names
// its first key in full (`inbox.workers`, `endpoints[].id`) and the keys
// after it by their last part (`batch`, `lease`), siblings of the first.
func tableKeys(page string) map[string]bool {
	keys := map[string]bool{}
	_, table, _ := strings.Cut(page, "| key | meaning |")
	tick := regexp.MustCompile("`([^`]+)`")
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "|") {
			if strings.TrimSpace(line) != "" {
				break
			}
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		parent := ""
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			name := strings.ReplaceAll(m[1], "[]", "")
			switch i := strings.LastIndex(name, "."); {
			case i >= 0:
				parent = name[:i+1]
				keys[name] = true
			case parent != "": // "(every queue) `base_backoff`" names no section
				keys[parent+name] = true
			}
		}
	}
	return keys
}

// exampleKeys are the keys config/example.yaml sets, and those its
// comments name beside a key of the same section: a commented-out block
// (`# tls:`) or an alternative (`url_env: DATABASE_URL  # or url_file`).
func exampleKeys(t *testing.T, example string) map[string]bool {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(example), &root); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode, yaml.SequenceNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := prefix + n.Content[i].Value
				keys[k] = true
				walk(n.Content[i+1], k+".")
			}
		case yaml.ScalarNode, yaml.AliasNode: // a value, no key below it
		}
	}
	walk(&root, "")

	inComments := map[string]bool{}
	for line := range strings.Lines(example) {
		_, comment, ok := strings.Cut(line, "#")
		if !ok {
			continue
		}
		for _, re := range []*regexp.Regexp{regexp.MustCompile(`^\s*([a-z_]+):`), regexp.MustCompile(`\bor ([a-z_]+)\b`)} {
			for _, m := range re.FindAllStringSubmatch(comment, -1) {
				inComments[m[1]] = true
			}
		}
	}
	var all []string
	configKeys(reflect.TypeFor[Config](), "", &all)
	for _, k := range all { // parents first: a commented block's keys follow it
		i := strings.LastIndex(k, ".")
		parent, leaf := "", k
		if i >= 0 {
			parent, leaf = k[:i], k[i+1:]
		}
		if !keys[k] && inComments[leaf] && (parent == "" || keys[parent]) {
			keys[k] = true
		}
	}
	return keys
}

// envConstants are the values of config.go's Env constants.
func envConstants(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var vars []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(n.Name, "Env") && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					vars = append(vars, v)
				}
			}
		}
	}
	if len(vars) == 0 {
		t.Fatal("no Env constants found in config.go")
	}
	return vars
}
