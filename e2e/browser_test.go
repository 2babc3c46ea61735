package e2e_test

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// axeSource is axe-core, vendored from npm (testdata/, MPL-2.0): the
// accessibility checker run on every console page.
//
//go:embed testdata/axe-core-4.11.1.min.js
var axeSource string

// chromium finds Debian's chromium; without it the browser tests are
// skipped, except in CI (.ci/run installs it), where they fail.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed: apt-get install -y chromium")
	}
	t.Skip("chromium is not installed (apt-get install -y chromium): skipping the browser tests")
	return ""
}

// startBrowser runs a headless chromium for the test, with a fresh
// profile and nothing that reaches the network by itself.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1000),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// tab is one browser session of its own (its own cookies).
type tab struct {
	t   *testing.T
	ctx context.Context
}

func newTab(t *testing.T, browser context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatal(err)
	}
	// htmx's hx-confirm asks window.confirm: the operator says yes.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	}()
	return &tab{t: t, ctx: ctx}
}

// bounded runs one browser step, bounded in time.
func bounded[T any](b *tab, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
	return v
}

// do runs steps in order, failing the test on error.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	bounded(b, what, chromedp.Steps(steps...))
}

// open navigates to the console path and waits for sel.
func (b *tab) open(url, sel string) {
	b.t.Helper()
	b.do("opening "+url, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(sel)))
}

// click clicks sel and waits for then.
func (b *tab) click(sel, then string) {
	b.t.Helper()
	b.do("clicking "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible), chromedp.WaitVisible(chromedp.CSS(then)))
}

// text returns the visible text of the first node matching sel.
func (b *tab) text(sel string) string {
	b.t.Helper()
	return bounded(b, "reading "+sel, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
}

// waitText waits until sel's text is want, reading it again and again for
// up to a minute: unlike text, it outlasts a navigation under way (a plain
// form's submission), during which one read may hang on the page being
// replaced, and it says what the page showed last.
func (b *tab) waitText(sel, want string) {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := "(nothing read)"
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel), chromedp.NodeVisible))
		cancel()
		if err == nil {
			if got == want {
				return
			}
			last = fmt.Sprintf("%q", got)
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
			shown, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + "\n" + document.body.innerText.slice(0, 2000)`))
			cancel()
			b.t.Fatalf("browser: %s still shows %s after a minute, want %q; the page (%v):\n%s", sel, last, want, err, shown)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitLocation waits until the page's URL contains part, for up to a
// minute. A plain form's submission navigates after Submit returns: until
// then the page before it is shown, and may hold what the next step waits
// for (a list before its search), which a step would then act on while the
// page is being replaced.
func (b *tab) waitLocation(part string) {
	b.t.Helper()
	deadline := time.Now().Add(time.Minute)
	last := "(nothing read)"
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 2*time.Second)
		loc, err := chromedp.Run(ctx, chromedp.Location())
		cancel()
		if err == nil {
			if strings.Contains(loc, part) {
				return
			}
			last = loc
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("browser: the page is still at %s after a minute, want a URL with %q", last, part)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// count returns how many nodes match sel (without waiting for any).
func (b *tab) count(sel string) int {
	b.t.Helper()
	return bounded(b, "counting "+sel, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
}

// location is the page's URL.
func (b *tab) location() string {
	b.t.Helper()
	return bounded(b, "reading the location", chromedp.Location())
}

// body is the page's visible text.
func (b *tab) body() string {
	b.t.Helper()
	return bounded(b, "reading the page", chromedp.Evaluate[string]("document.body.innerText"))
}

// post sends a form POST from the page, as a script on the page could,
// and returns the status: fields are sent as given (a missing csrf field
// stays missing).
func (b *tab) post(path string, fields map[string]string) int {
	b.t.Helper()
	form, _ := json.Marshal(fields)
	js := fmt.Sprintf(`fetch(%q, {method: "POST", body: new URLSearchParams(%s), redirect: "manual"}).then(r => r.status)`, path, form)
	return bounded(b, "posting "+path, chromedp.Evaluate[int](js, chromedp.EvalAwaitPromise))
}

// csrf is the session's CSRF token, as the page's forms carry it.
func (b *tab) csrf() string {
	b.t.Helper()
	return bounded(b, "reading the CSRF token", chromedp.Evaluate[string](`document.querySelector("input[name=csrf]").value`))
}

// screenshot saves the page under the test's artifact folder.
func (b *tab) screenshot(name string) string {
	b.t.Helper()
	png := bounded(b, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(b.t.ArtifactDir(), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// axeViolation is one rule axe-core found broken.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []string `json:"target"`
	} `json:"nodes"`
}

// accessible runs axe-core on the page and fails on any serious or
// critical violation.
func (b *tab) accessible(where string) {
	b.t.Helper()
	bounded(b, "loading axe-core", chromedp.Evaluate[bool](axeSource+";true"))
	vs := bounded(b, "running axe-core on "+where, chromedp.Evaluate[[]axeViolation](
		`axe.run(document, {resultTypes: ["violations"]}).then(r => r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => ({target: n.target.map(String)}))})))`,
		chromedp.EvalAwaitPromise))
	for _, v := range vs {
		if v.Impact == "serious" || v.Impact == "critical" {
			var targets []string
			for _, n := range v.Nodes {
				targets = append(targets, strings.Join(n.Target, " "))
			}
			b.t.Errorf("accessibility (%s) on %s: %s: %s (%s)", v.Impact, where, v.ID, v.Help, strings.Join(targets, "; "))
		}
	}
}
