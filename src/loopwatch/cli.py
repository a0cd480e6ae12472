"""``loopwatch``: scan traces for loops, show the configuration, run the demo.

A thin layer over the Python API (``loopwatch.scan``, ``loopwatch.read_runs``).
Exit status (FORMAT.md, docs/getting-started.md): 0 when the scan ran; 1 with
``--fail-on`` when a run reaches that verdict; 2 on a usage error, an invalid
configuration or unreadable input (which outranks 1), decided after every input was read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Final, TextIO

import orjson

from . import __version__
from ._build import describe
from .config import NEVER_AS_ZERO, Config, ConfigError
from .scan import Report, ScanFailure, Scanner, scan_one, scan_paths
from .traces import FORMATS, InputError, read_runs

__all__ = ["main"]

_SMALL_INPUT = 50_000  # below this many events, a single process is faster


def main(argv: Sequence[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else list(argv)
    if given[:1] == ["hook"]:  # before any config is read: a hook never fails the agent
        from .hooks._dispatch import main as hook

        return hook(given[1:])
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return 2
    if getattr(args, "config_free", False):  # install, doctor: they read (or judge) it
        free: int = args.func(args, None)
        return free
    try:
        config = Config.load(args.config) if getattr(args, "config", None) else Config.load()
    except ConfigError as exc:
        print(f"loopwatch: {exc}", file=sys.stderr)
        return 2
    command: Any = args.func
    try:
        result: int = command(args, config)
    except ConfigError as exc:  # found when the detectors are built (a missing extra...)
        print(f"loopwatch: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `loopwatch scan --json x | head`: the reader left; fine
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    return result


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopwatch", description="Catch LLM agents stuck in loops."
    )
    parser.add_argument(
        "--version", action="version", version=f"loopwatch {__version__} ({describe()})"
    )
    sub = parser.add_subparsers(dest="command")

    p_scan = sub.add_parser("scan", help="scan trace files for loops")
    p_scan.add_argument("paths", nargs="+", metavar="PATH", help="trace files, or - for stdin")
    p_scan.add_argument("--json", action="store_true", help="JSON Lines output (FORMAT.md)")
    p_scan.add_argument("--fail-on", choices=("warn", "stop"), help="exit 1 if any run reaches it")
    p_scan.add_argument("--config", metavar="FILE", help="a loopwatch.toml or pyproject.toml")
    p_scan.add_argument("--format", choices=(*FORMATS, "native"), help="force the trace format")
    p_scan.add_argument(
        "--jobs", type=int, default=0, metavar="N", help="worker processes (default: all cores)"
    )
    p_scan.add_argument(
        "--engine",
        choices=("dask",),
        help="scan on a distributed engine (a local cluster of --jobs workers, "
        "or the one at --engine-address)",
    )
    p_scan.add_argument(
        "--engine-address", metavar="ADDR", help="join this cluster (e.g. tcp://host:8786)"
    )
    p_scan.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="progress bar on stderr (auto: when stderr is a terminal)",
    )
    p_scan.add_argument(
        "--explain",
        metavar="RUN_ID",
        help="show one run as a timeline with its evidence (with --json: as one JSON object)",
    )
    p_scan.set_defaults(func=_cmd_scan)

    p_cal = sub.add_parser("calibrate", help="choose thresholds from runs you consider healthy")
    p_cal.add_argument("paths", nargs="+", metavar="GOOD", help="healthy runs (trace files)")
    p_cal.add_argument(
        "--target-false-stop",
        type=float,
        default=0.01,
        metavar="RATE",
        help="largest fraction of these runs that may be stopped (default 0.01)",
    )
    p_cal.add_argument("--out", metavar="FILE", help="write the configuration (loopwatch.toml)")
    p_cal.add_argument("--config", metavar="FILE", help="start from this configuration")
    p_cal.add_argument("--format", choices=(*FORMATS, "native"), help="force the trace format")
    p_cal.set_defaults(func=_cmd_calibrate)

    p_conf = sub.add_parser("config", help="show the effective configuration")
    p_conf.add_argument("--show", action="store_true", help="print it (the default)")
    p_conf.add_argument("--config", metavar="FILE", help="a loopwatch.toml or pyproject.toml")
    p_conf.set_defaults(func=_cmd_config)

    p_report = sub.add_parser("report", help="write a self-contained HTML report of traces")
    p_report.add_argument("paths", nargs="+", metavar="PATH", help="trace files, or - for stdin")
    p_report.add_argument("-o", "--output", default="loopwatch-report.html", help="HTML file")
    p_report.add_argument("--config", metavar="FILE", help="a loopwatch.toml or pyproject.toml")
    p_report.add_argument("--format", choices=(*FORMATS, "native"), help="force the trace format")
    p_report.set_defaults(func=_cmd_report)

    p_demo = sub.add_parser("demo", help="scan the bundled examples and replay a looping agent")
    p_demo.add_argument("--config", metavar="FILE", help="a loopwatch.toml or pyproject.toml")
    p_demo.set_defaults(func=_cmd_demo)

    from .hooks.commands import add_parsers  # hook, install, uninstall, doctor

    add_parsers(sub)
    return parser


# -- scan ----------------------------------------------------------------------------
def _peek_size(paths: Sequence[str]) -> int:
    total = 0
    for p in paths:
        with contextlib.suppress(OSError):
            total += os.path.getsize(p) if p != "-" else 0
    return total


def _cmd_explain(args: argparse.Namespace, config: Config) -> int:
    from rich.console import Console

    from .explain import explain, explain_json

    fmt = args.format
    scanner = Scanner(config)
    for item in read_runs(args.paths, fmt):
        if isinstance(item, InputError):
            print(item, file=sys.stderr)
        elif item.run_id == args.explain:
            report = scan_one(scanner, item)
            if isinstance(report, ScanFailure):
                print(report, file=sys.stderr)
                return 2
            if args.json:
                sys.stdout.write(
                    _json_line(explain_json(item.events, report, extra=scanner.engine.redact))
                )
            else:
                explain(item.events, report, Console(), extra=scanner.engine.redact)
            return 0
    print(f"loopwatch: no run {args.explain!r} in {', '.join(args.paths)}", file=sys.stderr)
    return 2


def _cmd_calibrate(args: argparse.Namespace, config: Config) -> int:
    from .calibrate import calibrate

    if not 0 <= args.target_false_stop < 1:
        print("loopwatch calibrate: --target-false-stop must be in [0, 1)", file=sys.stderr)
        return 2
    fmt = args.format
    runs = []
    for item in read_runs(args.paths, fmt):
        if isinstance(item, InputError):
            print(item, file=sys.stderr)
        else:
            runs.append(item.to_dict())
    if not runs:
        print("loopwatch calibrate: no runs to calibrate on", file=sys.stderr)
        return 2
    result = calibrate(runs, args.target_false_stop, config, progress=None)
    print(result.summary())
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(result.to_toml())
        print(f"wrote {args.out}")
    return 0


def _cmd_scan(args: argparse.Namespace, config: Config) -> int:
    if args.explain:
        return _cmd_explain(args, config)
    jobs = args.jobs if args.jobs > 0 else (os.cpu_count() or 1)
    if args.engine_address and not args.engine:
        print("loopwatch scan: --engine-address needs --engine", file=sys.stderr)
        return 2
    if args.engine:
        return _scan_on_engine(args, config, jobs)
    if _peek_size(args.paths) < _SMALL_INPUT * 100:  # ~100 bytes per event
        jobs = 1
    return _scan_and_print(args, config, jobs, None)


def _scan_on_engine(args: argparse.Namespace, config: Config, jobs: int) -> int:
    from .fleet import open_engine

    with contextlib.ExitStack() as stack:
        try:
            executor = stack.enter_context(open_engine(args.engine, args.engine_address, jobs))
        except ModuleNotFoundError as exc:  # names the extra to install
            print(f"loopwatch scan: {exc}", file=sys.stderr)
            return 2
        except (OSError, TimeoutError) as exc:
            where = args.engine_address or "a local cluster"
            print(
                f"loopwatch scan: cannot reach the {args.engine} engine at {where}: {exc}",
                file=sys.stderr,
            )
            return 2
        return _scan_and_print(args, config, jobs, executor)


def _scan_and_print(args: argparse.Namespace, config: Config, jobs: int, executor: Any) -> int:
    fmt = args.format
    show_progress = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    out = sys.stdout
    had_error = False
    unreadable = False
    failed = False
    rank = {"ok": 0, "warn": 1, "stop": 2}
    fail_rank = rank[args.fail_on] if args.fail_on else 99
    table = _HumanTable() if not args.json else None
    progress = _Progress(show_progress)
    with progress:
        for item in scan_paths(args.paths, config, jobs, executor, fmt):
            if isinstance(item, InputError):
                had_error = True
                # a whole file (not one line) unreadable, or a run lost to a bug
                unreadable = unreadable or item.whole_file or isinstance(item, ScanFailure)
                progress.print_error(str(item))
                continue
            progress.advance(item.events)
            if rank[item.verdict] >= fail_rank:
                failed = True
            if table is None:
                out.write(_json_line(item.to_dict()))
            else:
                table.add(item)
    if table is not None:
        table.render()
    return _exit_status(unreadable, had_error and progress.runs == 0, failed)


def _json_line(obj: dict[str, Any]) -> str:
    """One JSON Lines line. What orjson refuses (a lone surrogate or a huge integer
    handed in from Python) is written by the standard library, escaped to ASCII."""
    try:
        return orjson.dumps(obj).decode() + "\n"
    except TypeError:
        return json.dumps(obj, ensure_ascii=True, default=str) + "\n"


def _exit_status(unreadable: bool, nothing_read: bool, failed: bool) -> int:
    """The exit-status contract (FORMAT.md, docs/getting-started.md), decided once every
    input was read.

    2: some input could not be read (a file that cannot be opened, decompressed or
    decoded, a run that could not be scanned) or nothing readable was found; the
    report on stdout is incomplete, and that outranks what it says. 1: ``--fail-on``
    tripped. 0: otherwise. Malformed lines inside a readable file are reported on
    stderr (``path:line: reason``) without changing the status.
    """
    if unreadable or nothing_read:
        return 2
    return 1 if failed else 0


class _Progress:
    """A rich progress bar on stderr showing runs and events per second."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.runs = 0
        self.events = 0
        self._bar: Any = None
        self._task: Any = None
        self._start = time.perf_counter()

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.fields[runs]} runs, {task.fields[events]} events"),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("scan", runs=0, events=0, rate="")
        return self

    def advance(self, events: int) -> None:
        self.runs += 1
        self.events += events
        if self._bar is not None and (self.runs % 50 == 0 or events > 1000):
            elapsed = max(time.perf_counter() - self._start, 1e-9)
            self._bar.update(
                self._task,
                runs=self.runs,
                events=self.events,
                rate=f"{self.runs / elapsed:,.0f} runs/s, {self.events / elapsed:,.0f} events/s",
            )

    def print_error(self, line: str) -> None:
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False)
        else:
            print(line, file=sys.stderr)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)


class _HumanTable:
    """One row per run for people; past 500 runs only flagged runs get a row."""

    _MAX_ALL = 500

    def __init__(self) -> None:
        self.rows: list[Report] = []
        self.count = 0
        self.counts = {"ok": 0, "warn": 0, "stop": 0}
        self.detectors: dict[str, int] = {}

    def add(self, report: Report) -> None:
        self.count += 1
        self.counts[report.verdict] += 1
        for f in report.findings:
            self.detectors[f.detector] = self.detectors.get(f.detector, 0) + 1
        if report.verdict != "ok" or len(self.rows) < self._MAX_ALL:
            self.rows.append(report)

    def render(self, file: TextIO | None = None, console: Any = None) -> None:
        """Print the table to ``file`` (stdout), or on a rich ``console`` of the
        caller's (scripts/make_screenshot.py records one)."""
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        if not self.count:  # nothing was read: the stderr lines say why
            return
        if console is None:
            target = file or sys.stdout
            console = Console(file=target, width=None if target.isatty() else _piped_width())
        rows = self.rows
        if self.count > self._MAX_ALL:
            rows = [r for r in rows if r.verdict != "ok"]
        narrow = console.width < _NARROW
        table = Table(
            title=f"loopwatch scan: {_plural(self.count, 'run')}",
            pad_edge=not narrow,  # below 80 columns: 2 more for the finding
        )
        for col in _columns(console.width, rows, narrow):
            table.add_column(col.pop("header"), **col)
        style = {"ok": "green", "warn": "yellow", "stop": "bold red"}
        for r in rows:
            top = r.top_finding
            table.add_row(
                Text(r.run_id),
                f"[{style[r.verdict]}]{r.verdict}[/]",
                f"{r.score:.2f}",
                "-" if r.first_warn is None else str(r.first_warn),
                "-" if r.first_stop is None else str(r.first_stop),
                Text("" if top is None else f"{top.detector}: {_clip(top.message, 110)}"),
            )
        console.print(table)
        summary = ", ".join(f"{n} {v}" for v, n in self.counts.items())
        fired = ", ".join(
            f"{d} {n}" for d, n in sorted(self.detectors.items(), key=lambda x: -x[1])
        )
        console.print(f"{summary}." + (f" Findings by detector: {fired}." if fired else ""))


_ROOMY: Final = 100  # from this width on, "first warn" and "first stop" fit on one line
_NARROW: Final = 80  # below this width, the table's edges lose their padding


def _columns(width: int, rows: Sequence[Report], narrow: bool) -> list[dict[str, Any]]:
    """The scan table's columns for a console ``width`` columns wide (``narrow``: the
    table's edges are not padded).

    The top finding is what a reader needs most, so it gets the room: the short
    columns never wrap nor shrink (their headers go on two lines below 100 columns),
    and a long run id gives way first (cut with an ellipsis at 40% of the room left,
    a third below 80 columns); the finding wraps in the rest.
    """
    roomy = width >= _ROOMY
    longest_step = max(
        (len(str(s)) for r in rows for s in (r.first_warn, r.first_stop) if s is not None),
        default=1,
    )
    step_width = max(10 if roomy else 5, longest_step)
    # each column: its padding and the rule before it; then the last rule
    frame = 6 * 3 + 1 - (2 if narrow else 0)
    fixed = len("verdict") + len("score") + 2 * step_width + frame
    room = max(width - fixed, 10)
    longest_id = max((len(r.run_id) for r in rows), default=3)
    run_width = max(3, min(longest_id, room // 3 if narrow else room * 2 // 5))
    short = {"no_wrap": True, "overflow": "ellipsis"}
    return [
        {"header": "run", "max_width": run_width, **short},
        {"header": "verdict", "min_width": len("verdict"), **short},
        {"header": "score", "justify": "right", "min_width": len("score"), **short},
        *(
            {"header": name if roomy else name.replace(" ", "\n"), "justify": "right",
             "min_width": step_width, **short}
            for name in ("first warn", "first stop")
        ),
        {"header": "top finding", "min_width": min(room - run_width, 20),
         "max_width": room - run_width, "overflow": "fold"},
    ]  # fmt: skip


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _piped_width() -> int:
    """The table's width when stdout is not a terminal: ``COLUMNS`` when set (as
    ``COLUMNS=100 loopwatch scan ... | less`` asks), else 160."""
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else 160


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- config ----------------------------------------------------------------------------
def _cmd_config(args: argparse.Namespace, config: Config) -> int:
    sys.stdout.write(_toml(config))
    return 0


def _toml(config: Config) -> str:
    """The effective configuration as TOML (None thresholds written as 0 = never)."""
    data = config.to_dict()
    lines = [f"# effective loopwatch configuration (source: {config.source or 'defaults'})"]
    tables = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif value is None:
            lines.append(f"# {key}: not set")  # ttl_seconds from Python: never expire
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for name, table in tables:
        lines.append("")
        lines.append(f"[{name}]")
        for k, v in table.items():
            if v is None and k not in NEVER_AS_ZERO:
                lines.append(f"# {k}: not set")  # TOML has no null
            elif v is not None and not isinstance(v, (bool, int, float, str, list, tuple, Mapping)):
                lines.append(f"# {k}: {type(v).__name__} (set from Python)")
            else:
                lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if value is None:
        return "0"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if isinstance(value, (set, frozenset)):
        return "[" + ", ".join(_toml_value(v) for v in sorted(value, key=str)) + "]"
    if isinstance(value, (list, tuple)):  # order matters: per_tool's [warn_at, stop_at]
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    return orjson.dumps(str(value)).decode()


# -- report ----------------------------------------------------------------------------
def _cmd_report(args: argparse.Namespace, config: Config) -> int:
    try:
        from .report.cli import run_report  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        print(f"loopwatch report: {exc}", file=sys.stderr)  # exc names the install
        return 2
    code: int = run_report(args, config)
    return code


# -- demo ------------------------------------------------------------------------------
def _cmd_demo(args: argparse.Namespace, config: Config) -> int:
    from rich.console import Console

    from .guard import Guard

    console = Console()
    examples = resources.files("loopwatch") / "examples"
    paths = sorted(str(p) for p in examples.iterdir() if p.name.endswith(".jsonl"))
    console.rule("[bold]1. Offline: scanning the bundled example traces")
    table = _HumanTable()
    scanner = Scanner(config)
    for item in read_runs(paths):
        if isinstance(item, InputError):
            console.print(f"[red]{item}[/]")
            continue
        table.add(scanner.scan(item.to_dict()))
    table.render()

    console.rule("[bold]2. Run time: a scripted agent that keeps searching for the same thing")
    guard = Guard(config)
    run_id = "demo-agent"
    for turn in range(8):
        call = {"kind": "tool_call", "name": "web_search", "args": {"q": "paris weather"}}
        verdict = guard.observe(run_id, call)
        console.print(
            f"turn {turn + 1}: web_search(q='paris weather') -> [bold]{verdict.action}[/]"
        )
        if verdict.action != "ok":
            console.print(f"   {verdict.message}", markup=False)
        if verdict.action == "stop":
            console.print("[bold red]The guard stopped the run.[/]")
            break
        if verdict.action == "skip":
            continue
        guard.observe(run_id, {"kind": "tool_result", "name": "web_search", "text": "18C, cloudy"})

    console.rule("[bold]3. An HTML report of the example traces")
    try:
        from .report import write_report
    except ImportError as exc:  # jinja2 missing
        console.print(f"no HTML report: {exc}", markup=False)  # exc names the install
    else:
        summary = write_report(read_runs(paths), "loopwatch-report.html", config=config)
        console.print(f"wrote {summary.path}: open it in a browser", markup=False)
    return 0
