"""A self-contained HTML report of scanned runs: a summary, a table, a timeline per run.

``write_report(items, path)`` takes runs (``TraceRun``, FORMAT.md run dicts, or
``(TraceRun, Report)`` pairs when they are already scanned) and writes one HTML
file that opens from disk with no network: no CDN, no fonts, no fetches. A
Content-Security-Policy with ``default-src 'none'`` and hashes of the report's own
script and style makes that a property of the file rather than a promise: the
page cannot load anything, and no injected inline script or event handler runs.

Why these choices:

- **Jinja2** renders the page skeleton and the summary (counts, detectors, the
  score histogram, spend, input errors). It is maintained (Pallets), already the
  ``report`` extra, and its autoescaping makes every server-rendered string safe
  by default. Its ``generate()`` streams, so the page is written piece by piece.
- **Inline SVG written by the template** for the one chart (an 11-bar score
  histogram). A charting library would add hundreds of kilobytes of JavaScript to
  every report for a chart that is a dozen ``<rect>`` elements; SVG also passes
  the HTML validator and needs no script.
- **Vanilla JavaScript** renders the table and the timelines client-side from JSON
  embedded in ``<script type="application/json">`` data blocks. That keeps a
  10,000-run report usable: the table is paginated (never 10,000 rows in the DOM),
  a run's events are parsed only when the run is opened, and a timeline shows at
  most ``TIMELINE_PAGE`` marks at once. The script builds elements with
  ``textContent``, never ``innerHTML``, so trace text is never parsed as markup.
- **Embedded JSON is escaped for HTML**: every ``<`` becomes ``\\u003c`` (valid JSON,
  same string), so no ``</script>`` or ``<!--`` inside trace text can end or
  change the data block.

Memory stays bounded: runs are scanned one at a time and their compact records
spooled to temporary files, with only the summary's counters kept; the page is
then streamed out around the spooled data. Trace text is cut to its first
``preview_chars`` characters (the timeline shows "the start of its text"); the
report is for looking, the trace file stays the record.

The output is written to a temporary file beside ``path`` and renamed into place,
so a failed run never leaves a half-written report behind.
"""

from __future__ import annotations

import base64
import codecs
import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from typing import IO, Any

import orjson

try:
    from jinja2 import Environment, PackageLoader, StrictUndefined, Template
except ModuleNotFoundError as _exc:  # the report is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "report", "jinja2 (the HTML report)") from _exc
from markupsafe import Markup

from ..config import Config
from ..findings import Severity
from ..redact import compile_patterns, redact_prefix
from ..scan import Report, Scanner
from ..traces import InputError, TraceRun, parse_run

__all__ = ["PREVIEW_CHARS", "TIMELINE_PAGE", "ReportSummary", "write_report"]

PREVIEW_CHARS = 160  # characters of an event's text and arguments kept for the timeline
TIMELINE_PAGE = 10_000  # marks shown at once; longer runs get a pager (the JS reads this)
_MAX_LISTED_ERRORS = 200  # input errors listed in the page (all are counted)
_TOP_DETECTORS = 8
_CHUNK = 1 << 20  # bytes per piece when streaming the spooled data into the page

# Event kinds get one-letter codes in the embedded data: a 5,000-event run repeats them.
_KIND_CODES = {"model": "m", "tool_call": "c", "tool_result": "r", "user": "u", "span": "s"}

RunItem = TraceRun | InputError | tuple[TraceRun, Report] | Mapping[str, Any]


@dataclass(frozen=True)
class ReportSummary:
    """What ``write_report`` wrote: where, how many runs of each verdict, how big."""

    path: str
    runs: int
    verdicts: dict[str, int]
    errors: int
    bytes: int


@dataclass
class _Totals:
    """The summary's counters, updated per run; the only state that grows with detectors."""

    runs: int = 0
    verdicts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "warn": 0, "stop": 0})
    detectors: dict[str, list[int]] = field(default_factory=dict)  # name -> [runs, findings, stops]
    histogram: list[int] = field(default_factory=lambda: [0] * 11)
    spend_runs: int = 0
    tokens: float = 0.0
    cost: float = 0.0
    tokens_after_warn: float = 0.0
    cost_after_warn: float = 0.0
    flagged_spend_runs: int = 0
    # whether any run recorded tokens / cost: a trace with tokens only has no "0 cost"
    has_tokens: bool = False
    has_cost: bool = False
    errors: list[str] = field(default_factory=list)
    error_count: int = 0

    def add_error(self, error: InputError) -> None:
        self.error_count += 1
        if len(self.errors) < _MAX_LISTED_ERRORS:
            self.errors.append(str(error))

    def add_run(self, report: Report, spend: _Spend) -> None:
        self.runs += 1
        self.verdicts[report.verdict] = self.verdicts.get(report.verdict, 0) + 1
        seen: set[str] = set()
        for finding in report.findings:
            counts = self.detectors.setdefault(finding.detector, [0, 0, 0])
            counts[1] += 1
            if finding.severity is Severity.STOP:
                counts[2] += 1
            if finding.detector not in seen:
                seen.add(finding.detector)
                counts[0] += 1
        self.histogram[_score_bin(report.score)] += 1
        if spend.present:
            self.spend_runs += 1
            self.has_tokens = self.has_tokens or spend.has_tokens
            self.has_cost = self.has_cost or spend.has_cost
            self.tokens += spend.tokens
            self.cost += spend.cost
            if report.first_warn is not None:
                self.flagged_spend_runs += 1
                self.tokens_after_warn += spend.tokens_after_warn
                self.cost_after_warn += spend.cost_after_warn


@dataclass
class _Spend:
    """Tokens and cost of one run, and the part spent after the first warning.

    "After the first warning" means the events after the warned step: a guard
    that stopped the run at the warning would not have spent it.
    """

    present: bool = False
    has_tokens: bool = False
    has_cost: bool = False
    tokens: float = 0.0
    cost: float = 0.0
    tokens_after_warn: float = 0.0
    cost_after_warn: float = 0.0


def write_report(
    items: Iterable[RunItem],
    path: str | os.PathLike[str],
    *,
    config: Config | None = None,
    title: str = "loopwatch report",
    preview_chars: int = PREVIEW_CHARS,
    on_error: Callable[[InputError], None] | None = None,
) -> ReportSummary:
    """Write a self-contained HTML report of ``items`` to ``path``.

    ``items`` is streamed once, in order. Each item is a ``TraceRun`` or a
    FORMAT.md run dict (scanned here with ``Scanner(config)``), a
    ``(TraceRun, Report)`` pair (already scanned), or an ``InputError`` (listed in
    the report and passed to ``on_error``, e.g. to print it; the report goes on).
    A run dict that is not a valid run becomes an ``InputError`` the same way.
    """
    if preview_chars < 1:
        raise ValueError("preview_chars must be at least 1")
    target = os.fspath(path)
    scanner: Scanner | None = None
    totals = _Totals()
    extra = compile_patterns(config.redact_patterns) if config is not None else ()
    directory = os.path.dirname(os.path.abspath(target))
    with tempfile.TemporaryFile() as rows, tempfile.TemporaryFile() as details:
        for item in items:
            if isinstance(item, Mapping):
                item = parse_run(dict(item), "<input>", None)
            if isinstance(item, InputError):
                totals.add_error(item)
                if on_error is not None:
                    on_error(item)
                continue
            if isinstance(item, TraceRun):
                if scanner is None:
                    scanner = Scanner(config)
                run, report = item, scanner.scan(item.to_dict())
            else:
                run, report = item
            row, detail, spend = _records(totals.runs, run, report, preview_chars, extra)
            if totals.runs:
                rows.write(b",\n")
            rows.write(row)
            details.write(detail)
            details.write(b"\n")
            totals.add_run(report, spend)
        context = _context(totals, title)
        fd, tmp_path = tempfile.mkstemp(prefix=".loopwatch-report-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                stream = _template().generate(
                    **context, rows_json=_spooled(rows), details_json=_spooled(details)
                )
                for piece in stream:
                    out.write(piece.encode("utf-8"))
            os.chmod(tmp_path, 0o644)
            os.replace(tmp_path, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
            raise
    return ReportSummary(
        path=target,
        runs=totals.runs,
        verdicts=dict(totals.verdicts),
        errors=totals.error_count,
        bytes=os.path.getsize(target),
    )


# -- per-run records -------------------------------------------------------------------
def _records(
    index: int,
    run: TraceRun,
    report: Report,
    preview_chars: int,
    extra: tuple[re.Pattern[str], ...] = (),
) -> tuple[bytes, bytes, _Spend]:
    """The run's table row and detail line (events, findings) as HTML-safe JSON, and its spend.

    Arguments, texts and the run's metadata are shown redacted (:mod:`loopwatch.redact`,
    ``extra``: the configuration's own patterns): a report is shared more than a trace.

    One pass over the events builds the timeline marks and sums the spend: at
    10,000 runs this loop is most of the report's own cost.
    """
    first_warn = report.first_warn
    spend = _Spend()
    marks: list[dict[str, Any]] = []
    kind_codes = _KIND_CODES
    for position, event in enumerate(run.events):
        kind = event.get("kind")
        code = kind_codes.get(kind, "?") if isinstance(kind, str) else "?"
        mark: dict[str, Any] = {"k": code}
        if code == "?" and isinstance(kind, str) and kind:
            mark["ko"] = _clip(kind, 40)
        name = event.get("name")
        if name is not None:
            mark["n"] = _clip(name if isinstance(name, str) else _json_text(name), 120)
        args = event.get("args")
        if args is not None:
            shown = redact_prefix(
                args if isinstance(args, str) else _json_text(args), preview_chars, extra
            )
            mark["a"] = _clip(shown, preview_chars)
        text = event.get("text")
        if text is not None:
            if not isinstance(text, str):
                text = _json_text(text)
            if len(text) > preview_chars:
                mark["t"] = redact_prefix(text, preview_chars, extra)[:preview_chars]
                mark["tl"] = len(text)
            else:
                mark["t"] = redact_prefix(text, preview_chars, extra)
        if event.get("error") is True:
            mark["er"] = 1
        tokens = event.get("tokens")
        cost = event.get("cost")
        if tokens is not None or cost is not None:
            after = first_warn is not None and position > first_warn
            tokens = _finite(tokens)
            if tokens is not None:
                spend.present = spend.has_tokens = True
                mark["tk"] = _number(tokens)
                spend.tokens += tokens
                if after:
                    spend.tokens_after_warn += tokens
            cost = _finite(cost)
            if cost is not None:
                spend.present = spend.has_cost = True
                mark["c"] = _number(cost)
                spend.cost += cost
                if after:
                    spend.cost_after_warn += cost
        agent = event.get("agent")
        if agent and isinstance(agent, str):
            mark["ag"] = _clip(agent, 80)
        span_type = event.get("type")
        if span_type and isinstance(span_type, str):
            mark["ty"] = _clip(span_type, 80)
        marks.append(mark)

    top = report.top_finding
    row: dict[str, Any] = {
        "i": index,
        "id": run.run_id,
        "v": report.verdict,
        "s": report.score,
        "w": report.first_warn,
        "x": report.first_stop,
        "n": len(run.events),
        "d": sorted({f.detector for f in report.findings}),
        "nf": len(report.findings),
    }
    if top is not None:
        row["td"] = top.detector
        row["tm"] = _clip(top.message, 300)
    if spend.has_tokens:  # only what the trace recorded: no "0 cost" for tokens alone
        row["tk"] = _number(spend.tokens)
        if first_warn is not None:
            row["tka"] = _number(spend.tokens_after_warn)
    if spend.has_cost:
        row["c"] = _number(spend.cost)
        if first_warn is not None:
            row["ca"] = _number(spend.cost_after_warn)
    detail: dict[str, Any] = {
        "e": marks,
        "f": [
            [f.detector, f.severity.value, f.step, list(f.steps), f.message]
            for f in report.findings
        ],
    }
    if run.meta:
        detail["m"] = _clip(redact_prefix(_json_text(run.meta), 1000, extra), 1000)
    source = f"{run.path}:{run.line}" if run.line is not None else run.path
    if source:
        detail["src"] = source
    return _html_json(row), _html_json(detail), spend


def _finite(value: Any) -> float | None:
    """A usable number (not a bool, NaN or infinity), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _number(value: float) -> int | float:
    """Whole numbers as ints (``312``, not ``312.0``); others rounded for display."""
    return int(value) if value.is_integer() else round(value, 6)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_text(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
    except TypeError:  # lone surrogates, deep nesting...: a readable fallback
        return json.dumps(value, default=str, ensure_ascii=True)


def _html_json(value: Any) -> bytes:
    """JSON that is safe inside a ``<script>`` data block: ``<`` written as ``\\u003c``.

    ``<`` can only occur inside JSON strings, where ``\\u003c`` is the same
    character, so the data parses back unchanged while ``</script>`` and ``<!--``
    cannot appear in the page. orjson never writes a raw newline, so each record
    stays on one line (the detail block is one record per line).
    """
    try:
        data = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # strings with lone surrogates: json escapes them as \\udXXX
        data = json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode()
    return data.replace(b"<", b"\\u003c")


def _spooled(spool: IO[bytes]) -> Iterator[Markup]:
    """The spooled JSON, decoded piece by piece (a piece may end mid-character)."""
    spool.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    while True:
        chunk = spool.read(_CHUNK)
        text = decoder.decode(chunk, final=not chunk)
        if text:
            yield Markup(text)
        if not chunk:
            return


# -- the page --------------------------------------------------------------------------
def _score_bin(score: float) -> int:
    """Bins 0..9 hold [0.0, 0.1), ..., [0.9, 1.0); bin 10 holds a clean 1.0."""
    if score >= 1.0:
        return 10
    return min(9, max(0, int(score * 10)))


def _histogram(counts: list[int]) -> dict[str, Any]:
    """Geometry of the score histogram's bars, drawn as inline SVG by the template."""
    width, height, top, bottom, left = 440, 150, 18, 22, 6
    slot = (width - left) / len(counts)
    peak = max(counts) or 1
    bars = []
    for index, count in enumerate(counts):
        label = "1.0" if index == 10 else f"{index / 10:.1f}"
        title = (
            "score 1.0 (clean)" if index == 10 else f"score {index / 10:.1f}–{(index + 1) / 10:.1f}"
        )
        h = (height - top - bottom) * count / peak
        bars.append(
            {
                "x": round(left + index * slot + 2, 1),
                "y": round(height - bottom - h, 1),
                "w": round(slot - 4, 1),
                "h": round(h, 1),
                "ty": round(height - bottom - h - 4, 1),
                "cx": round(left + index * slot + slot / 2, 1),
                "label": label,
                "count": count,
                "title": f"{title}: {count} run{'s' if count != 1 else ''}",
                "tone": "ok" if index == 10 else ("stop" if index < 5 else "warn"),
            }
        )
    return {"width": width, "height": height, "base": height - bottom, "bars": bars}


def _context(totals: _Totals, title: str) -> dict[str, Any]:
    script = _asset("report.js")
    style = _asset("report.css")
    detectors = sorted(totals.detectors.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))
    runs = totals.runs
    return {
        "title": title,
        "generated": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "script": Markup(script),
        "style": Markup(style),
        "script_hash": _csp_hash(script),
        "style_hash": _csp_hash(style),
        "runs": runs,
        "verdicts": totals.verdicts,
        "share": {v: (100.0 * n / runs if runs else 0.0) for v, n in totals.verdicts.items()},
        "detectors": [
            {"name": name, "runs": c[0], "findings": c[1], "stops": c[2]}
            for name, c in detectors[:_TOP_DETECTORS]
        ],
        "detector_names": sorted(totals.detectors),
        "histogram": _histogram(totals.histogram),
        "spend": {
            "runs": totals.spend_runs,
            "tokens": _number(totals.tokens),
            "cost": _number(totals.cost),
            "tokens_after_warn": _number(totals.tokens_after_warn),
            "cost_after_warn": _number(totals.cost_after_warn),
            "flagged_runs": totals.flagged_spend_runs,
            "has_tokens": totals.has_tokens,
            "has_cost": totals.has_cost,
        },
        "errors": totals.errors,
        "error_count": totals.error_count,
        "timeline_page": TIMELINE_PAGE,
    }


def _csp_hash(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "sha256-" + base64.b64encode(digest).decode("ascii")


@lru_cache(maxsize=4)
def _asset(name: str) -> str:
    return (resources.files(__name__) / "templates" / name).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader(__name__, "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["thousands"] = _thousands
    env.filters["amount"] = _amount
    return env


def _template() -> Template:
    return _environment().get_template("report.html")


def _thousands(value: float) -> str:
    return f"{value:,.0f}"


def _amount(value: float) -> str:
    """A cost: enough decimals to show small per-call prices, no currency assumed."""
    if value == 0:
        return "0"
    return f"{value:,.2f}" if abs(value) >= 100 else f"{value:,.4f}"
