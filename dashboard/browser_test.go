package dashboard_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/processor"
)

// chrome finds a Chromium or Chrome to drive: $CHROME, else the first of
// the usual names on PATH (Debian's package installs chromium).
func chrome() string {
	if p := os.Getenv("CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// css is a CSS selector (a plain string would be a DOM search).
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// until polls the page until the JavaScript expression js is true (a
// poll in the page itself would need eval, which the page's
// Content-Security-Policy forbids).
func until(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		for {
			ok, err := chromedp.Evaluate[bool](js)(ctx, tg)
			if err != nil || ok {
				return err
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w", js, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
}

// probeFetch wraps the page's fetch: each call waits 300ms before it is
// made, and fails with a 503 while window.probe.fail is set; window.probe
// counts the calls under way (most at once in max) and those done.
const probeFetch = `(() => {
  const real = window.fetch;
  const p = (window.probe = { active: 0, max: 0, done: 0, fail: false, restore: () => { window.fetch = real; } });
  window.fetch = async (...args) => {
    p.active++;
    p.max = Math.max(p.max, p.active);
    try {
      await new Promise((r) => setTimeout(r, 300));
      if (p.fail) return new Response(JSON.stringify({ error: "authz is not running" }), { status: 503 });
      return await real(...args);
    } finally {
      p.active--;
      p.done++;
    }
  };
  return true;
})()`

// screenshots is where the browser test saves its screenshots:
// $TICKFLOW_SCREENSHOTS, else the test's artifact directory (kept with
// go test -artifacts, under -outputdir).
func screenshots(t *testing.T) string {
	if d := os.Getenv("TICKFLOW_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

// TestBrowser drives the dashboard in headless Chromium as a person would:
// logs in as the owner, sees a queued batch in flight, replays a dead
// letter and sees the new batch, purges the dead letter once it confirms
// (and keeps it when it does not), opens a batch's page, and pauses the
// domain; a throttled domain shows its throttle; the page's refreshes never overlap, even when authz answers
// slower than the refresh period, and back off while they fail; a count of
// batches in flight not counted in full reads "N+". With TICKFLOW_DOCS_SCREENSHOT set it also writes the overview to
// docs/dashboard.png.
func TestBrowser(t *testing.T) {
	path := chrome()
	if path == "" {
		t.Skip("no Chromium found: install Debian's chromium package (make test does), or set CHROME to a Chrome or Chromium binary")
	}
	b := setup(t)
	failed := b.send(t, fail())
	// A replica throttled to 50 steps a second settles the failing batch:
	// the domain's row shows the throttle its replicas share.
	throttled, err := processor.New(b.ctx, b.env.Conn(t, "processor"), processor.Options{Domain: domain, Name: "processor-throttled", Throttle: 50})
	if err != nil {
		t.Fatal(err)
	}
	rec := b.settledBy(t, throttled, failed)
	// A one-function batch keeps its output for its page.
	produced := b.send(t, flaky())
	b.settledBy(t, throttled, produced)
	stepped := b.send(t, noop(), noop())
	// The queue's consumer learns of a token a moment after its publish is
	// acknowledged, so the first tick may find nothing yet.
	var rep api.TickReport
	testnats.Eventually(t, 5*time.Second, "a step", func() bool {
		rep = b.proc.Tick(b.ctx, 1)
		return rep.Status != api.TickNoMessages
	})
	if len(rep.Steps) != 1 || rep.Steps[0].Action != api.ActionRotated {
		t.Fatalf("tick: %+v", rep)
	}
	queued := b.send(t, noop(), noop(), noop())
	// Nothing ticks the processor from here on: both batches stay in flight.

	dir := screenshots(t)
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, name), png, 0o644)
		})
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 860))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// Start the browser on bctx itself: each step below runs under a
	// deadline of its own, and the first run's context owns the browser.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v", path, err)
	}

	// The page asks before it purges (window.confirm): each dialog is
	// answered with the next of answers, and its message sent on asked.
	answers, asked := make(chan bool, 1), make(chan string, 1)
	dialogs := chromedp.Events(bctx, page.JavascriptDialogOpening)
	dialogsDone := make(chan struct{})
	go func() {
		defer close(dialogsDone)
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			var accept bool
			select {
			case accept = <-answers:
			case <-bctx.Done():
				return
			}
			select {
			case asked <- ev.Message:
			case <-bctx.Done():
				return
			}
			if _, err := chromedp.Call(bctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept}); err != nil {
				return
			}
		}
	}()
	defer func() { bcancel(); <-dialogsDone }()
	// ask answers the next dialog with accept, and checks it said want.
	ask := func(accept bool, want string, click chromedp.Action[chromedp.Void]) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			select {
			case answers <- accept:
			case <-ctx.Done():
				return ctx.Err()
			}
			if _, err := click(ctx, tg); err != nil {
				return err
			}
			select {
			case msg := <-asked:
				if !strings.Contains(msg, want) {
					return fmt.Errorf("the dialog said %q, want %q in it", msg, want)
				}
				return nil
			case <-ctx.Done():
				return fmt.Errorf("no dialog asked: %w", ctx.Err())
			}
		})
	}

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		for i, a := range actions {
			sctx, scancel := context.WithTimeout(bctx, 10*time.Second)
			err := chromedp.Do(sctx, a)
			scancel()
			if err != nil {
				var html string
				html, _ = chromedp.Run(bctx, chromedp.OuterHTML(css("body")))
				t.Fatalf("%s, step %d: %v\npage: %s", what, i+1, err, html)
			}
		}
	}
	run("log in",
		chromedp.Navigate(b.url+"/"),
		chromedp.WaitVisible(css("#login")),
		shot("login.png"),
		chromedp.SendKeys(css("#user"), "owner"),
		chromedp.SendKeys(css("#password"), "local-owner"),
		chromedp.Click(css("#login")),
		chromedp.WaitVisible(css("#domain-pay")),
	)
	run("see the domain's throttle",
		until(`document.getElementById("throttle-pay").textContent.startsWith("50 steps/s (")`),
	)
	run("see the queued batch in flight",
		chromedp.WaitVisible(css(fmt.Sprintf("#inflight-%d", queued))),
		chromedp.WaitVisible(css(fmt.Sprintf("#inflight-%d", stepped))),
		until(`document.getElementById("count-pay").textContent === "(2, oldest first)"`),
		shot("overview.png"),
	)
	run("refresh once at a time, however slow the answers",
		chromedp.Evaluate[chromedp.Void](probeFetch),
		until(`window.probe.done >= 6`),
		until(`window.probe.max === 1`),
	)
	run("back off while refreshes fail, and recover",
		chromedp.Evaluate[chromedp.Void](`window.probe.fail = true`),
		until(`document.getElementById("updated").textContent.endsWith("next try in 1.2s")`),
		chromedp.Evaluate[chromedp.Void](`window.probe.fail = false`),
		until(`document.getElementById("updated").textContent.startsWith("updated")`),
		until(`window.probe.max === 1`),
		chromedp.Evaluate[chromedp.Void](`window.probe.restore()`),
	)

	run("replay the dead letter",
		chromedp.Click(css("#nav-dlq")),
		chromedp.WaitVisible(css(fmt.Sprintf("#replay-%d", rec.DeadLetter))),
		shot("dead-letters.png"),
		chromedp.Click(css(fmt.Sprintf("#replay-%d", rec.DeadLetter))),
		chromedp.WaitVisible(css(fmt.Sprintf("#dead-%d .replayed", rec.DeadLetter))),
		shot("replayed.png"),
	)
	dlq, err := b.owner.DLQ(b.ctx, api.DLQRequest{Domain: domain})
	if err != nil || len(dlq.Items) != 1 || dlq.Items[0].ReplayedAs == 0 {
		t.Fatalf("dead letters after the replay: %+v %v", dlq, err)
	}
	replayed := dlq.Items[0].ReplayedAs
	run("see the new batch",
		chromedp.Click(css("#nav-overview")),
		chromedp.WaitVisible(css(fmt.Sprintf("#inflight-%d", replayed))),
	)

	run("see what runs: the worker, and that no processor serves pay",
		chromedp.Click(css("#nav-running")),
		chromedp.WaitVisible(css("#worker-0")),
		until(`document.getElementById("worker-0").textContent.includes("noop")`),
		until(`document.getElementById("unserved").textContent.includes("no running processor serves its domain pay")`),
		shot("running.png"),
	)

	run("a finished batch's page shows its output",
		chromedp.Navigate(fmt.Sprintf("%s/#/batch/%d", b.url, produced)),
		until(`(document.getElementById("output-0") || {}).textContent === "0flaky1"`),
		chromedp.Navigate(b.url+"/"),
		chromedp.WaitVisible(css("#domain-pay")),
	)
	run("keep the dead letters when the purge is not confirmed, then purge one",
		chromedp.Click(css("#nav-dlq")),
		chromedp.WaitVisible(css("#purge-all-pay")),
		ask(false, "every dead letter of pay", chromedp.Click(css("#purge-all-pay"))),
		chromedp.WaitVisible(css(fmt.Sprintf("#purge-%d", rec.DeadLetter))),
		ask(true, fmt.Sprintf("dead letter %d of batch #%d", rec.DeadLetter, failed), chromedp.Click(css(fmt.Sprintf("#purge-%d", rec.DeadLetter)))),
		until(fmt.Sprintf(`document.getElementById("dead-%d") === null && document.getElementById("notice").textContent === "1 dead letter(s) purged"`, rec.DeadLetter)),
		shot("purged.png"),
	)
	if dlq, err := b.owner.DLQ(b.ctx, api.DLQRequest{Domain: domain}); err != nil || len(dlq.Items) != 0 {
		t.Fatalf("dead letters after the purge: %+v %v", dlq, err)
	}

	run("open a batch's page",
		chromedp.Click(css("#nav-overview")),
		chromedp.WaitVisible(css(fmt.Sprintf("#inflight-%d", stepped))),
		chromedp.Click(css(fmt.Sprintf("#inflight-%d .batch-link", stepped))),
		chromedp.WaitVisible(css("#progress")),
		shot("batch.png"),
		chromedp.Click(css("#nav-overview")),
		chromedp.WaitVisible(css("#pause-pay")),
	)

	run("pause the domain",
		chromedp.Click(css("#pause-pay")),
		chromedp.WaitVisible(css("#resume-pay")),
		chromedp.WaitVisible(css(fmt.Sprintf("#inflight-%d", replayed))),
		shot("paused.png"),
	)
	doms, err := b.owner.Domains(b.ctx)
	if err != nil || !doms.Domains[0].Paused || doms.Domains[0].PausedBy != "owner" {
		t.Fatalf("after the click, authz says: %+v %v", doms, err)
	}
	if os.Getenv("TICKFLOW_DOCS_SCREENSHOT") != "" {
		data, err := os.ReadFile(filepath.Join(dir, "paused.png"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "dashboard.png"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	for range 20 {
		b.send(t, noop())
	}
	run("see a count not made in full",
		until(`document.getElementById("count-pay").textContent === "(20+, oldest first)"`),
	)
	t.Logf("screenshots in %s", dir)
}
