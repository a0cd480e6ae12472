"""MkDocs hooks for the documentation site (mkdocs.yml ``hooks:``).

``<!-- config-reference -->`` in a page becomes the configuration reference, generated
from ``loopwatch.config``: every top-level key and every detector's section with its
default, the values it accepts (the same tables ``Config.validate`` judges with) and
what it means. A key or a detector parameter without a description here fails the
build (``mkdocs build --strict`` and tests/core/test_docs.py), so the reference cannot fall
behind the schema.
"""

from __future__ import annotations

import inspect
from typing import Any

from loopwatch import config as schema

MARKER = "<!-- config-reference -->"

TOP_KEYS: dict[str, tuple[str, str]] = {
    # key: (accepted values, meaning)
    "on_loop": (
        '`"stop"`, `"skip"` or `"warn"`',
        "What the guard answers when a detector is sure (a stop-level finding): end the "
        "run, skip the call (the model gets the message instead of the tool's result), "
        "or only warn.",
    ),
    "max_iterations": (
        "a whole number >= 1",
        "Shortcut for `[iteration_cap] max_iterations`: the most model turns a run may "
        "take. `0` is refused: for no cap, set `[iteration_cap] enabled = false` (or "
        "`max_iterations=None` from Python).",
    ),
    "tell_first": (
        "true or false",
        "A stop is earned: a stop-level finding the agent was not told about is told "
        'first (a warning; under `on_loop = "stop"` the call is skipped with the reason) '
        'and the run is stopped when the agent persists, with "You were told at step N" '
        "in the message. A chanting output and a budget stop at once. `false` stops at "
        "the first stop-level finding.",
    ),
    "exempt_tools": (
        "a list of tool names",
        "Tools no detector sees (pollers, clocks): their calls and results are invisible "
        "to every detector.",
    ),
    "store": (
        "a store URL: `memory://`, `redis://host:port/db`, `redis+cluster://...`, "
        "`sqlite:///path/state.db`",
        "Where the guard keeps run state ([stores](stores.md)). A URL's `ttl_seconds` and "
        "`max_runs` are checked like the keys below.",
    ),
    "max_runs": (
        "a whole number >= 1",
        "Live runs kept in memory (or in SQLite); past it the least recently used is dropped.",
    ),
    "ttl_seconds": (
        'a duration: a number of seconds > 0, or a string such as `"90s"`, `"30m"`, '
        '`"1h"`, `"1h30m"`, `"2d"`',
        "A run idle this long is forgotten: its next step starts afresh. Required by a "
        "shared store (Redis, SQLite), where every run must expire.",
    ),
    "on_store_error": (
        '`"allow"` or `"raise"`',
        "A store that is down or slow: let the step through unexamined (`allow`, the "
        "agent is never taken down), or raise `StoreUnavailable`.",
    ),
}

# Detector parameters, by name; (detector, name) for one detector's own meaning.
PARAMS: dict[str | tuple[str, str], str] = {
    "enabled": "Run this detector.",
    "warn_at": "Warn when the count this detector keeps reaches this.",
    "stop_at": "Stop when it reaches this (`0`: never stop, warn only).",
    ("repeated_call", "warn_at"): "Warn at this many identical calls in a row that each "
    "returned the same result (a stop at the same count is told first).",
    ("repeated_call", "stop_at"): "Stop at this many identical calls in a row that each "
    "returned the same result (`0`: never). Calls whose results the trace does not hold "
    "prove nothing.",
    "result_warn_at": "Tell the agent when this many identical calls in a row worked and "
    "answered the same, in words (not a bare ok, not a failure): the next one will too "
    "(`0`: never).",
    ("restated_reply", "warn_at"): "Warn at this many replies that restate an earlier one.",
    ("restated_reply", "stop_at"): "Stop at this many (`0`: never).",
    "window_warn_at": "Warn when the same call comes back this many times in the recent "
    "window, with other work between.",
    "window_stop_at": "Stop at this many in the window (`0`: never).",
    "tool_warn_at": "Warn when one tool has failed this many times.",
    "tool_stop_at": "Stop when one tool has failed this many times (`0`: never).",
    ("error_loop", "warn_at"): "Warn at this many repeats of the same error.",
    ("error_loop", "stop_at"): "Stop at this many repeats of the same error (`0`: never).",
    "resent_stop_at": "Stop at this many repeats of the same error once the agent re-sent a "
    "call that had already failed with it (`0`: never).",
    "recurring_warn_at": "Warn when one tool has failed with the same error this many times "
    "while other calls worked in between (`0`: never).",
    "max_period": "The longest sequence of calls (2 and up) looked for as a cycle.",
    "warn_repeats": "Warn when the cycle has come round this many times.",
    "stop_repeats": "Stop when it has come round this many times (`0`: never).",
    "similarity": "How alike two texts must be to count as the same (0 to 1].",
    "min_words": "Texts shorter than this many words are not compared.",
    "max_iterations": "The most model turns a run may take (>= 1).",
    "warn_ratio": "Warn at this fraction of the limit (0 to 1].",
    "warn_after": "Warn after this many model turns in a row that bring nothing new.",
    "stop_after": "Stop after this many (`0`: never).",
    "min_tokens": "A turn below this many tokens does not count as spend.",
    "min_cost": "A turn below this cost does not count as spend.",
    "min_output_novelty": "Share of new words [0, 1] that makes an output new.",
    "min_new_words": "New words that make an output new, whatever its length.",
    "overlap": "Word overlap (0 to 1] that makes two hand-offs the same request.",
    "min_run": "Words in a row two replies must share for one to restate the other.",
    "min_content": "Content words (not filler or pleasantries) those shared runs must hold.",
    "semantic": "Also compare hand-offs by meaning (needs an embedder or the `semantic` extra).",
    "embedder": "An object with `embed(texts) -> vectors` (from Python only).",
    "window": "How many recent calls the share is taken over.",
    "per_tool": "Per-tool `[warn_at, stop_at]` pairs, e.g. `{ get_status = [40, 0] }`.",
    "exempt": "Tool names this detector ignores.",
    "max_chars": "Characters of a text that are embedded.",
    "max_tokens": "The run's token limit (required when enabled).",
    "max_cost": "The run's cost limit (required when enabled).",
    "max_seconds": 'The run\'s wall-time limit, a duration (`600`, `"10m"`, `"1h"`; '
    "required when enabled).",
    "warn_attempts": "Warn when a status has not changed for this many checks made "
    "without waiting in between (`0`: never).",
    "max_attempts": "Stop when a status has not changed for more than this many checks "
    "(`0`: no limit in checks); warned at half.",
    ("wait_budget", "max_seconds"): "Stop when a status has not changed for longer than "
    'this much waiting, a duration (`1800`, `"30m"`, `"2h"`); warned at half.',
    "attempts": "Tries of one target (a point, a text, an address) with no progress in "
    "the narration that make a loop.",
    "radius": "Two pointer actions within this many pixels act on the same target.",
    "failures": 'Failure signals in the narration ("didn\'t change", "let me try again") '
    "among those tries needed to stop.",
    "absent_warn_at": "Warn when the narration has reported the same name missing this "
    "many times (`0`: never).",
    "absent_stop_at": "Stop at this many (`0`: never).",
    "clock": "A callable returning seconds (from Python only; default: the events' `ts`, "
    "else the system clock).",
}


def _accepted(name: str, default: Any) -> str:
    if name == "enabled":
        return "true or false"
    if name in schema._COUNTS:
        low = schema._COUNTS[name]
        never = " (`0`: never)" if name in schema._OPTIONAL_COUNTS else ""
        return f"a whole number >= {low}{never}"
    if name in schema._FRACTIONS:
        return "a number in [0, 1]" if schema._FRACTIONS[name] else "a number in (0, 1]"
    if name in schema._DURATIONS:
        return 'a duration (seconds, or `"10m"`, `"1h"`...)'
    if name in schema._AMOUNTS:
        return "a number >= 0" if schema._AMOUNTS[name] else "a number > 0"
    if name == "per_tool":
        return "a table of `[warn_at, stop_at]` pairs"
    if name == "exempt":
        return "a list of tool names"
    if isinstance(default, bool):
        return "true or false"
    return "an object (from Python)"


def _show(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (frozenset, set, tuple, list)):
        return "`[]`" if not value else f"`{sorted(value)}`"
    if not isinstance(value, (int, float)):
        return "`{}`" if not value else f"`{dict(value)}`"
    return f"`{value}`"


def _first_paragraph(cls: type) -> str:
    doc = inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def reference() -> str:
    """The configuration reference, as Markdown."""
    defaults = schema.Config()
    missing = sorted(schema._TOP_KEYS - set(TOP_KEYS))
    if missing:
        raise RuntimeError(f"docs_hooks.TOP_KEYS has no description of {missing}")
    lines = [
        "## Top-level keys",
        "",
        "| key | default | accepts | meaning |",
        "|---|---|---|---|",
    ]
    shown = defaults.to_dict()
    for key, (accepts, meaning) in TOP_KEYS.items():
        value = shown.get(key, schema.Config().max_iterations if key == "max_iterations" else None)
        lines.append(f"| `{key}` | {_show(value)} | {accepts} | {meaning} |")
    lines.append("")
    for name, (cls, default_on) in schema.DETECTORS.items():
        lines += [f"## `[{name}]`", "", _first_paragraph(cls), ""]
        lines += ["| key | default | accepts | meaning |", "|---|---|---|---|"]
        params = {"enabled": default_on, **schema._defaults(cls)}
        for param, value in params.items():
            meaning = PARAMS.get((name, param)) or PARAMS.get(param)
            if meaning is None:
                raise RuntimeError(f"docs_hooks.PARAMS has no description of [{name}] {param}")
            lines.append(f"| `{param}` | {_show(value)} | {_accepted(param, value)} | {meaning} |")
        lines.append("")
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: put the generated reference where the marker is."""
    if MARKER in markdown:
        return markdown.replace(MARKER, reference())
    return markdown
