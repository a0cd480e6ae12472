"""``loopwatch report PATH... -o FILE``: scan traces and write the HTML report.

Exit status follows FORMAT.md: 0 when the report was written; 2 on unreadable
input that left no run to report, or when the report file cannot be written.
Input errors go to stderr as ``path:line: reason`` (and into the report), and the
report goes on with the other runs.
"""

from __future__ import annotations

import argparse
import sys

from ..config import Config
from ..traces import InputError, read_runs
from . import write_report

__all__ = ["run_report"]


def run_report(args: argparse.Namespace, config: Config) -> int:
    """Run the ``report`` subcommand; ``args`` has ``paths``, ``output``, ``format``."""
    fmt = args.format

    def print_error(error: InputError) -> None:
        print(error, file=sys.stderr)

    try:
        summary = write_report(
            read_runs(args.paths, fmt),
            args.output,
            config=config,
            on_error=print_error,
        )
    except OSError as exc:
        where = exc.filename or args.output
        print(f"loopwatch report: cannot write {where}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if summary.errors and summary.runs == 0:
        print(
            f"loopwatch report: no readable run; {summary.path} lists the errors", file=sys.stderr
        )
        return 2
    counts = ", ".join(f"{n} {verdict}" for verdict, n in summary.verdicts.items())
    print(
        f"wrote {summary.path}: {summary.runs} runs ({counts}), {summary.bytes / 1e6:.2f} MB",
        file=sys.stderr,
    )
    return 0
