"""The HTML report in a real browser: headless Debian Chromium driven by Playwright.

These tests fail (never skip) when Chromium is missing: ``bash
scripts/services.d/chromium.sh`` installs it. Screenshots go to
``build/test-artifacts/``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwatch import Config, Scanner, TraceRun
from loopwatch.report import TIMELINE_PAGE, write_report

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / "build" / "test-artifacts"


# -- traces ----------------------------------------------------------------------------
def looping_run(run_id: str, repeats: int, tokens: int | None = 100) -> dict[str, Any]:
    """The same search with the same result ``repeats`` times: repeated_call fires."""
    events: list[dict[str, Any]] = [{"kind": "user", "text": "Find the weather in Paris."}]
    for turn in range(repeats):
        model: dict[str, Any] = {"kind": "model", "text": f"Searching again, attempt {turn}."}
        if tokens is not None:
            model["tokens"] = tokens
            model["cost"] = 0.001
        events.append(model)
        events.append(
            {
                "kind": "tool_call",
                "name": "web_search",
                "args": {"q": "paris weather"},
                "id": f"c{turn}",
            }
        )
        events.append(
            {"kind": "tool_result", "name": "web_search", "id": f"c{turn}", "text": "18C, cloudy"}
        )
    return {"run_id": run_id, "events": events}


def clean_run(run_id: str, pages: int) -> dict[str, Any]:
    """Pagination: every call and result differ, so nothing fires."""
    events: list[dict[str, Any]] = [{"kind": "user", "text": "List every order."}]
    for page in range(pages):
        events.append({"kind": "tool_call", "name": "orders", "args": {"page": page}})
        events.append(
            {"kind": "tool_result", "name": "orders", "text": f"orders {page * 10}-{page * 10 + 9}"}
        )
    events.append({"kind": "span", "name": "summariser", "type": "agent", "text": "sum up"})
    events.append({"kind": "model", "text": "Here are all the orders."})
    return {"run_id": run_id, "events": events}


def many_loops_run(run_id: str, loops: int) -> dict[str, Any]:
    """``loops`` different searches, each repeated until it is stopped (the defaults stop
    the 3rd identical call): one stop finding per search (the scan lists each pattern
    once)."""
    events: list[dict[str, Any]] = [{"kind": "user", "text": "Find everything."}]
    for i in range(loops):
        for _ in range(3):
            events.append({"kind": "tool_call", "name": "web_search", "args": {"q": f"topic {i}"}})
            events.append({"kind": "tool_result", "name": "web_search", "text": f"result {i}"})
    return {"run_id": run_id, "events": events}


def scanned(runs: list[dict[str, Any]], config: Config | None = None) -> list[tuple[TraceRun, Any]]:
    scanner = Scanner(config or Config())
    return [
        (TraceRun(r["run_id"], r["events"], path="t.jsonl", line=i + 1), scanner.scan(r))
        for i, r in enumerate(runs)
    ]


# -- browser ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"{CHROMIUM} is missing: run `bash scripts/services.d/chromium.sh` "
            "(or `make services`) to install Debian's chromium for the report tests"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the report tests need Playwright: .venv/bin/pip install playwright")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


class Page:
    """A page with every console message, page error and request recorded."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.console: list[tuple[str, str]] = []
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("html[data-ready='1']", timeout=30_000)

    def assert_clean(self) -> None:
        bad = [m for m in self.console if m[0] in ("error", "warning")]
        assert not bad, f"console errors: {bad}"
        assert not self.errors, f"page errors: {self.errors}"
        outside = [u for u in self.requests if not u.startswith(("file:", "data:"))]
        assert not outside, f"the report reached the network: {outside}"

    def open_run(self, run_id: str) -> None:
        """Filter the table down to the run and click its row."""
        self.page.fill("#f-text", run_id)
        row = self.page.locator("#run-rows tr", has_text=run_id).first
        row.click()
        self.page.wait_for_function(
            "id => document.getElementById('run-title').textContent === id", arg=run_id
        )

    def marks(self) -> Any:
        return self.page.locator("#timeline .mk")

    def close(self) -> None:
        self.page.close()


@pytest.fixture
def open_page(browser: Any) -> Iterator[Any]:
    pages: list[Page] = []

    def opener(path: Path) -> Page:
        pages.append(Page(browser, path))
        return pages[-1]

    yield opener
    for page in pages:
        page.close()


def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.page.screenshot(path=str(ARTIFACTS / name), full_page=True)


# -- tests -----------------------------------------------------------------------------
def test_table_and_timeline_render_with_a_row_per_run_and_a_mark_per_event(
    tmp_path: Path, open_page: Any
) -> None:
    runs = [looping_run(f"loop-{i:03d}", 3 + i % 4) for i in range(30)]
    runs += [clean_run(f"clean-{i:03d}", 2 + i % 5) for i in range(90)]
    # the defaults stop the 3rd identical call outright; this test needs warned runs and a
    # run whose first warning comes before its stop (3 and 4 repeats warn, 5 and 6 stop)
    items = scanned(runs, Config.from_mapping({"repeated_call": {"warn_at": 3, "stop_at": 5}}))
    path = tmp_path / "report.html"
    write_report(items, path)
    page = open_page(path)

    verdicts = [report.verdict for _, report in items]
    assert all(verdicts.count(v) for v in ("ok", "warn", "stop")), "each count is shown"
    for verdict in ("ok", "warn", "stop"):
        assert page.page.inner_text(f"#count-{verdict}") == str(verdicts.count(verdict))
    # 120 runs, 50 per page: pages of 50, 50, 20
    assert page.page.locator("#run-rows tr").count() == 50
    page.page.click("#page-next")
    assert page.page.locator("#run-rows tr").count() == 50
    page.page.click("#page-next")
    assert page.page.locator("#run-rows tr").count() == 20
    assert page.page.is_disabled("#page-next")

    target_run, target = next((r, rep) for r, rep in items if rep.verdict == "stop")
    assert target.first_warn < target.first_stop
    page.open_run(target_run.run_id)
    assert page.marks().count() == len(target_run.events)
    assert page.page.get_attribute("#timeline .mk.pt-w", "data-i") == str(target.first_warn)
    assert page.page.get_attribute("#timeline .mk.pt-s", "data-i") == str(target.first_stop)
    evidence = {s for f in target.findings for s in (*f.steps, f.step)}
    marked = page.page.eval_on_selector_all(
        "#timeline .mk.ev-w, #timeline .mk.ev-s", "els => els.map(e => Number(e.dataset.i))"
    )
    assert set(marked) == evidence
    assert page.page.locator("#findings li[data-f]").count() == len(target.findings)
    screenshot(page, "report-table-and-timeline.png")
    page.assert_clean()


def test_clicking_a_finding_highlights_exactly_its_evidence_events(
    tmp_path: Path, open_page: Any
) -> None:
    items = scanned([looping_run("loop", 7), clean_run("clean", 3)])
    path = tmp_path / "report.html"
    write_report(items, path)
    page = open_page(path)
    run, report = items[0]
    page.open_run(run.run_id)
    assert len(report.findings) >= 2
    for index, finding in enumerate(report.findings):
        page.page.click(f"#findings li[data-f='{index}'] button")
        selected = page.page.eval_on_selector_all(
            "#timeline .mk.sel", "els => els.map(e => Number(e.dataset.i))"
        )
        assert sorted(selected) == sorted(set(finding.steps))
        assert "focus" in (page.page.get_attribute("#timeline", "class") or "")
        assert page.page.locator("#findings li.active").count() == 1
        assert finding.message in page.page.inner_text("#findings li.active")
        # the firing step's details are shown, with the finding's message
        detail = page.page.inner_text("#event-detail")
        assert f"step {finding.step}" in detail
        assert finding.message in detail
    screenshot(page, "report-finding-selected.png")
    # clicking the selected finding again clears the highlight
    last = len(report.findings) - 1
    page.page.click(f"#findings li[data-f='{last}'] button")
    assert page.page.locator("#timeline .mk.sel").count() == 0
    assert "focus" not in (page.page.get_attribute("#timeline", "class") or "")
    page.assert_clean()


def test_hovering_a_mark_shows_its_name_arguments_and_text(tmp_path: Path, open_page: Any) -> None:
    long_text = "result line. " * 100
    run = {
        "run_id": "hover",
        "events": [
            {"kind": "user", "text": "go"},
            {"kind": "tool_call", "name": "lookup_customer", "args": {"customer": "ACME-42"}},
            {"kind": "tool_result", "name": "lookup_customer", "text": long_text, "error": True},
        ],
    }
    path = tmp_path / "report.html"
    write_report([run], path)
    page = open_page(path)
    page.open_run("hover")
    page.page.hover("#timeline .mk[data-i='1']")
    detail = page.page.inner_text("#event-detail")
    assert "lookup_customer" in detail
    assert '"customer":"ACME-42"' in detail
    page.page.hover("#timeline .mk[data-i='2']")
    detail = page.page.inner_text("#event-detail")
    assert long_text[:150] in detail
    assert f"of {len(long_text):,} characters" in detail
    assert "failed" in detail
    # a click pins the event: hovering elsewhere no longer changes the detail
    page.page.click("#timeline .mk[data-i='1']")
    page.page.hover("#timeline .mk[data-i='0']")
    assert "lookup_customer" in page.page.inner_text("#event-detail")
    page.assert_clean()


def test_sorting_and_filtering_the_table(tmp_path: Path, open_page: Any) -> None:
    runs = [looping_run(f"loop-{i}", 3 + i % 4) for i in range(12)]
    runs += [clean_run(f"clean-{i}", 2 + i) for i in range(8)]
    items = scanned(runs)
    path = tmp_path / "report.html"
    write_report(items, path)
    page = open_page(path)
    page.page.select_option("#f-size", "100")

    def column(index: int) -> list[str]:
        cells: list[str] = page.page.eval_on_selector_all(
            f"#run-rows tr td:nth-child({index})", "els => els.map(e => e.textContent)"
        )
        return cells

    scores = [float(s) for s in column(3)]
    assert scores == sorted(scores)  # default: worst first
    page.page.click("#run-table th[data-key='n'] button")
    lengths = [int(n.replace(",", "")) for n in column(7)]
    assert lengths == sorted(lengths, reverse=True)
    page.page.click("#run-table th[data-key='n'] button")
    lengths = [int(n.replace(",", "")) for n in column(7)]
    assert lengths == sorted(lengths)

    stops = sorted(r.run_id for r, rep in items if rep.verdict == "stop")
    page.page.select_option("#f-verdict", "stop")
    assert sorted(column(1)) == stops
    page.page.select_option("#f-verdict", "")
    page.page.fill("#f-text", "clean-")
    page.page.wait_for_function("() => document.querySelectorAll('#run-rows tr').length === 8")
    assert all(name.startswith("clean-") for name in column(1))
    page.assert_clean()


def test_script_in_a_trace_is_shown_as_text_and_never_runs(tmp_path: Path, open_page: Any) -> None:
    payload = "<script>window.__pwned = 1</script><img src=x onerror='window.__pwned = 2'>"
    run = {
        "run_id": "xss</script><script>window.__pwned = 3</script>",
        "meta": {"note": payload},
        "events": [
            {"kind": "user", "text": payload},
            {
                "kind": "tool_call",
                "name": "<b onmouseover='window.__pwned=4'>t</b>",
                "args": {"q": payload},
            },
            {"kind": "tool_result", "name": "t", "text": payload},
        ],
    }
    path = tmp_path / "report.html"
    write_report([run], path)
    page = open_page(path)
    page.open_run(run["run_id"])
    for index in range(3):
        page.page.hover(f"#timeline .mk[data-i='{index}']")
        page.page.click(f"#timeline .mk[data-i='{index}']")
        page.page.click(f"#timeline .mk[data-i='{index}']")
    assert page.page.evaluate("window.__pwned") is None
    assert page.page.locator("#event-detail pre", has_text=payload).count() == 1
    assert page.page.inner_text("#run-title") == run["run_id"]
    assert payload in page.page.inner_text("#run-meta")
    # only the report's own three script elements exist, and no injected image
    assert page.page.locator("script").count() == 3
    assert page.page.locator("img").count() == 0
    page.assert_clean()


def test_a_long_run_renders_every_event_and_pages_past_the_limit(
    tmp_path: Path, open_page: Any
) -> None:
    long_run = looping_run("five-thousand", 1666)  # 1 + 3 * 1666 = 4,999 events
    long_run["events"].append({"kind": "model", "text": "done"})
    huge_run = clean_run("huge", (TIMELINE_PAGE + 2_000) // 2)
    items = scanned([long_run, huge_run, many_loops_run("many-loops", 450)])
    path = tmp_path / "report.html"
    write_report(items, path)
    page = open_page(path)

    page.open_run("five-thousand")
    assert page.marks().count() == 5_000
    assert page.page.is_hidden("#timeline-pager")
    # one long loop is a few findings (one per pattern, with a count)...
    assert len(items[0][1].findings) < 20
    # ...many different loops are hundreds: they are listed 200 at a time
    page.open_run("many-loops")
    findings = len(items[2][1].findings)
    assert findings > 400
    listed = page.page.locator("#findings li[data-f]")
    assert listed.count() == 200
    page.page.click("#findings-more")
    assert listed.count() == 400

    page.open_run("huge")
    total = len(huge_run["events"])
    assert page.marks().count() == TIMELINE_PAGE
    assert page.page.is_visible("#timeline-pager")
    page.page.click("#tl-next")
    assert page.marks().count() == total - TIMELINE_PAGE
    assert page.page.get_attribute("#timeline .mk", "data-i") == str(TIMELINE_PAGE)
    page.assert_clean()
