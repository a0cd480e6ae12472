"""Every code block of the documentation site and of the README runs, as written.

* Python blocks are executed, in a folder holding the bundled example traces under the
  names the pages use (``traces.jsonl``...). A block that needs a framework's scripted
  model is marked ``<!-- run-by: tests/<area>/test_x.py -->``: that test runs it (here: the
  test exists and reads the page).
* In shell blocks, ``loopwatch ...`` lines are run through the command line's ``main``
  in such a folder (``~`` is a home folder there too) and must exit 0, or 1 with
  ``--fail-on``; ``pip install`` lines must name extras that exist, ``make`` lines
  targets that exist, ``python ...`` lines scripts that exist. A block marked
  ``<!-- not-run: why -->`` says why it cannot run here.
* TOML blocks load as configurations; JSON blocks parse.

Also: the README stays a landing page (at most 250 lines, the two set-up commands
first), its picture is the real scan of the examples, and the configuration
reference covers every key.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from glob import glob
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from loopwatch import Config
from loopwatch.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = resources.files("loopwatch") / "examples" / "agents.jsonl"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(
    r"(?:<!-- (?P<mark>[a-z-]+)(?::\s*(?P<arg>[^>]*?))? -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```",
    re.DOTALL,
)


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    code: str
    mark: str | None
    arg: str | None

    @property
    def where(self) -> str:
        return str(self.page.relative_to(ROOT))


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        for m in FENCE.finditer(page.read_text(encoding="utf-8")):
            found.append(Block(page, m["lang"], m["code"], m["mark"], m["arg"]))
    return found


ALL = blocks()


def of(lang: tuple[str, ...], marks: tuple[str | None, ...] = (None,)) -> list[Any]:
    return [
        pytest.param(b, id=f"{b.where}#{i}")
        for i, b in enumerate(ALL)
        if b.lang in lang and b.mark in marks
    ]


def test_every_block_has_a_known_language_and_mark() -> None:
    for block in ALL:
        assert block.lang in {"python", "sh", "toml", "json", "text"}, block.where
        assert block.mark in {None, "run-by", "not-run", "tour"}, (block.where, block.mark)
        if block.mark == "not-run":
            assert block.lang == "sh" and block.arg, block.where  # says why
    assert len(ALL) > 50  # the pages were read


# -- a folder with the example traces under the names the pages use --------------------
@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    examples = EXAMPLES.read_bytes()
    for name in ("traces.jsonl", "runs.jsonl", "healthy-runs.jsonl"):
        (tmp_path / name).write_bytes(examples)
    (tmp_path / "otel-traces.jsonl.gz").write_bytes(gzip.compress(examples))
    (tmp_path / "langsmith-runs.json").write_bytes(examples)
    for where in ("traces", ".claude/projects/p", ".codex/sessions/2026", ".gemini/tmp/p/chats",
                  ".qwen/projects/p/chats", ".copilot/session-state/s",
                  ".local/share/opencode"):  # fmt: skip
        (tmp_path / where).mkdir(parents=True)
        (tmp_path / where / "session.jsonl").write_bytes(examples)
    import pyarrow.parquet as pq

    from loopwatch import read_runs
    from loopwatch.traces.columnar import runs_to_table

    runs = [r.to_dict() for r in read_runs(str(tmp_path / "traces.jsonl"))]  # type: ignore[union-attr]
    pq.write_table(runs_to_table(runs), tmp_path / "events.parquet")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))  # ~ in a command is this folder
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / ".state"))
    monkeypatch.delenv("LOOPWATCH_STORE", raising=False)
    return tmp_path


# -- Python ---------------------------------------------------------------------------
def run_python(code: str, where: str) -> str:
    out = io.StringIO()
    namespace: dict[str, Any] = {"__name__": "docs"}
    with contextlib.redirect_stdout(out):
        exec(compile(code, where, "exec"), namespace)
    return out.getvalue()


@pytest.mark.parametrize("block", of(("python",)))
def test_python_blocks_run(block: Block, folder: Path) -> None:
    run_python(block.code, block.where)


def test_the_tour_is_one_program_and_it_stops_the_loop(folder: Path) -> None:
    """The README's tour and getting started's are the same complete program; it warns
    on the third reworded search that lands on the same answer, handles both verdicts,
    and stops on the fifth (a wording close to the one before counts double)."""
    tours = [b for b in ALL if b.mark == "tour"]
    assert {b.where for b in tours} == {"README.md", "docs/getting-started.md"}
    assert len({b.code for b in tours}) == 1
    code = tours[0].code
    assert "after = guard.observe(" in code and "verdict = guard.observe(" in code
    printed = run_python(code + "\nprint(len(notes))\n", "tour")
    lines = printed.splitlines()
    assert lines[0].startswith("stopped at turn 4: [loopwatch] Run stopped: Your last 4 steps")
    assert int(lines[-1]) >= 1  # the warnings the model was given before the stop


@pytest.mark.parametrize("block", of(("python",), ("run-by",)))
def test_blocks_run_by_a_test_are_read_from_their_page(block: Block) -> None:
    test = ROOT / (block.arg or "")
    assert test.is_file(), block.arg
    source = test.read_text(encoding="utf-8")
    page = block.page.name
    module = page.removesuffix(".md").replace("-", "_")
    assert page in source or f'readme_snippet("{module}")' in source, (block.where, block.arg)


# -- shell ----------------------------------------------------------------------------
def commands(code: str) -> Iterator[list[str]]:
    for line in code.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            yield argv


def run_loopwatch(argv: list[str]) -> tuple[int, str]:
    args: list[str] = []
    for arg in argv[1:]:
        arg = os.path.expanduser(arg)
        args.extend(sorted(glob(arg)) if "*" in arg else [arg])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("block", of(("sh",)))
def test_shell_blocks_run(block: Block, folder: Path, tmp_path_factory: Any) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(pyproject["project"]["optional-dependencies"])
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    template = folder
    for argv in commands(block.code):
        if argv[0] == "loopwatch":
            # each command in a fresh copy: one must not see what another wrote
            here = tmp_path_factory.mktemp("cmd")
            shutil.copytree(template, here, dirs_exist_ok=True)
            os.chdir(here)
            os.environ["HOME"] = str(here)
            code, output = run_loopwatch(argv)
            allowed = {0, 1} if "--fail-on" in argv else {0}
            assert code in allowed, (block.where, argv, output)
            assert "Traceback" not in output
        elif argv[:2] == ["pip", "install"]:
            for spec in argv[2:]:
                named = re.fullmatch(r"loopwatch(?:\[([\w,-]+)\])?", spec)
                assert named, (block.where, spec)
                assert set((named[1] or "").split(",")) - {""} <= extras, (block.where, spec)
        elif argv[0] == "make":
            assert set(argv[1:]) <= targets, (block.where, argv)
        elif argv[0] in ("python", ".venv/bin/python"):
            assert (ROOT / argv[1]).is_file(), (block.where, argv)
        else:
            pytest.fail(f"{block.where}: a command the docs test does not know: {argv}")


def test_blocks_that_do_not_run_here_say_why() -> None:
    for block in ALL:
        if block.mark == "not-run":
            assert len(block.arg or "") > 10, block.where


# -- configuration and data -----------------------------------------------------------
@pytest.mark.parametrize("block", of(("toml",)))
def test_toml_blocks_are_valid_configurations(block: Block, folder: Path) -> None:
    data = tomllib.loads(block.code)
    table = data.get("tool", {}).get("loopwatch", data)
    Config.from_mapping(table)


@pytest.mark.parametrize("block", of(("json",)))
def test_json_blocks_parse(block: Block) -> None:
    try:
        json.loads(block.code)
    except json.JSONDecodeError:  # JSON Lines: one value per line
        for line in block.code.splitlines():
            if line.strip():
                json.loads(line)


# -- the README, its picture, the generated reference ---------------------------------
def test_the_readme_is_a_landing_page() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    first = re.search(r"```sh\n(.*?)```", text, re.DOTALL)
    assert first is not None and text.index("```sh") < 40
    assert [line.split()[:2] for line in first[1].splitlines()] == [
        ["make", "demo"],
        ["make", "test"],
    ]
    for link in re.findall(r"\]\(((?:docs/|CONTRIBUTING)[^)#]*)", text):
        assert (ROOT / link).is_file(), link


def svg_text(svg: str) -> str:
    """The characters an SVG terminal capture shows, without its layout."""
    parts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    return re.sub(r"\s+", " ", "".join(parts).replace("&#160;", " ")).strip()


def test_the_picture_is_the_scan_of_the_examples() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import make_screenshot
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    shown = (DOCS / "assets" / "scan.svg").read_text(encoding="utf-8")
    fresh = make_screenshot.render()
    assert svg_text(shown) == svg_text(fresh), (
        "docs/assets/scan.svg is not what the scan shows now: "
        "run .venv/bin/python scripts/make_screenshot.py"
    )
    assert "loopwatch scan: 6 runs" in svg_text(fresh)


def test_the_configuration_reference_covers_every_key() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import docs_hooks
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    from loopwatch.config import _TOP_KEYS, DETECTORS, _defaults

    reference = docs_hooks.reference()
    for key in _TOP_KEYS:
        assert f"| `{key}` |" in reference, key
    for name, (cls, _) in DETECTORS.items():
        section = reference.split(f"## `[{name}]`")[1].split("\n## ")[0]
        for param in ("enabled", *_defaults(cls)):
            assert f"| `{param}` |" in section, (name, param)
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert docs_hooks.on_page_markdown(page, None, None, None).count("## `[") == len(DETECTORS)
