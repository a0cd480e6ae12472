"""A compact terminal timeline of one run, with each finding's evidence highlighted.

``loopwatch scan FILE --explain RUN_ID`` prints it: one line per event (index, kind,
tool or agent, arguments or the start of the text), the steps that are evidence for a
finding marked and coloured, and each finding's message where it fired. Long runs
are folded: only the events near a finding are shown, with a count of those skipped.
With ``--json`` the same is one JSON object (:func:`explain_json`), for scripts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from re import Pattern
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.text import Text

from .detectors.base import preview
from .findings import Severity
from .scan import Report

__all__ = ["explain", "explain_json"]

_GLYPH = {"model": "M", "tool_call": "→", "tool_result": "←", "user": "U", "span": "S"}
_CONTEXT = 3  # events shown around evidence when folding


def _describe(event: Mapping[str, Any], extra: tuple[Pattern[str], ...] = ()) -> str:
    """One event's line: its arguments or the start of its text, secrets redacted."""
    kind = event.get("kind")
    who = event.get("agent")
    if kind == "tool_call":
        return f"{event.get('name')}({preview(event.get('args'), 70, extra)})"
    limit = 80 if kind == "tool_result" else 70 if kind == "span" else 90
    text = preview(event.get("text"), limit, extra)
    if kind == "tool_result":
        err = " ERROR" if event.get("error") else ""
        return f"{event.get('name') or ''}{err}: {text!r}"
    if kind == "span":
        return f"{event.get('type') or 'span'} {event.get('name')}: {text!r}"
    return f"{who}: {text!r}" if who else repr(text)


def explain(
    events: Sequence[Mapping[str, Any]],
    report: Report,
    console: Console,
    fold: bool = True,
    extra: tuple[Pattern[str], ...] = (),
) -> None:
    """Print the timeline of one run and why it was flagged (arguments and texts with
    secrets redacted; ``extra``: the configuration's own patterns)."""
    style = {"ok": "green", "warn": "yellow", "stop": "bold red"}[report.verdict]
    console.print(
        Text.assemble(
            ("run ", "bold"),
            (report.run_id, "bold"),
            ": ",
            (report.verdict, style),
            f"  score {report.score:.2f}  first warn {report.first_warn}  "
            f"first stop {report.first_stop}  {len(events)} events",
        )
    )
    evidence: dict[int, str] = {}
    fired: dict[int, list[str]] = {}
    for number, f in enumerate(report.findings, 1):
        tone = "red" if f.severity is Severity.STOP else "yellow"
        for s in f.steps:
            evidence.setdefault(s, tone)
        fired.setdefault(f.step, []).append(
            f"[{tone}]#{number} {f.detector} {f.severity}: {escape(f.message)}[/]"
        )
    shown = set(range(len(events)))
    if fold and evidence and len(events) > 40:
        shown = set()
        for s in set(evidence) | set(fired):
            shown.update(range(max(0, s - _CONTEXT), min(len(events), s + _CONTEXT + 1)))
    skipped = 0
    colour: str | None
    for i, event in enumerate(events):
        if i not in shown:
            skipped += 1
            continue
        if skipped:
            console.print(f"      [dim]... {skipped} events ...[/]")
            skipped = 0
        colour = evidence.get(i)
        mark = "▌" if colour else " "
        marker = ""
        if i == report.first_stop:
            marker = " [bold red]◀ STOP[/]"
        elif i == report.first_warn:
            marker = " [yellow]◀ WARN[/]"
        line = Text(f"{mark}{i:>5} {_GLYPH.get(str(event.get('kind')), '?')} ")
        line.append(_describe(event, extra), style=colour or "")
        console.print(line, end="")
        console.print(marker)
        for message in fired.get(i, []):
            console.print(f"        {message}")
    if skipped:
        console.print(f"      [dim]... {skipped} events ...[/]")


def explain_json(
    events: Sequence[Mapping[str, Any]], report: Report, extra: tuple[Pattern[str], ...] = ()
) -> dict[str, Any]:
    """The timeline as data: the run's ``--json`` object plus ``timeline``, one entry
    per event (``step``, ``kind``, ``summary``: the line the terminal view shows,
    ``evidence``: the indices in ``findings`` of the findings it is evidence for,
    ``fired``: those that fired at it, and ``mark``: ``"warn"``/``"stop"`` at the
    first warning and the first stop). Nothing is folded; arguments and texts are
    redacted as in :func:`explain`."""
    evidence: dict[int, list[int]] = {}
    fired: dict[int, list[int]] = {}
    for number, f in enumerate(report.findings):
        for s in f.steps:
            evidence.setdefault(s, []).append(number)
        fired.setdefault(f.step, []).append(number)
    timeline = []
    for i, event in enumerate(events):
        entry: dict[str, Any] = {
            "step": i,
            "kind": event.get("kind"),
            "summary": _describe(event, extra),
            "evidence": evidence.get(i, []),
            "fired": fired.get(i, []),
        }
        if i == report.first_stop:
            entry["mark"] = "stop"
        elif i == report.first_warn:
            entry["mark"] = "warn"
        timeline.append(entry)
    return {**report.to_dict(), "timeline": timeline}
