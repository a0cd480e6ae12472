"""Write docs/assets/scan.svg: ``loopwatch scan`` of the bundled examples, as a picture.

The README and the docs' home page show it. It is the real table, rendered by the
command line's own code into a rich console that records it; rerun this script when
the scan's output changes (tests/core/test_docs.py fails until the picture matches):

    .venv/bin/python scripts/make_screenshot.py
"""

from __future__ import annotations

import io
import sys
from importlib import resources
from pathlib import Path

from rich.console import Console

from loopwatch import Config, InputError, Scanner, read_runs
from loopwatch.cli import _HumanTable

OUT = Path(__file__).resolve().parents[1] / "docs" / "assets" / "scan.svg"
WIDTH = 118


def render() -> str:
    """The SVG of the scan table of the bundled examples, with the defaults."""
    examples = resources.files("loopwatch") / "examples" / "agents.jsonl"
    table = _HumanTable()
    scanner = Scanner(Config())
    for item in read_runs(str(examples)):
        if isinstance(item, InputError):
            raise SystemExit(f"the bundled examples do not read: {item}")
        table.add(scanner.scan(item))
    console = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True)
    table.render(console=console)
    return console.export_svg(title="loopwatch scan examples/agents.jsonl")


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
