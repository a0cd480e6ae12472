"""Finding the configuration in a pyproject.toml: every way TOML can spell a
``[tool.loopwatch]`` table is found (the file is parsed only when it may hold one,
which spares a coding-agent hook the TOML parser in most projects)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwatch.config import Config, find_config_file

SPELLINGS = [
    '[tool.loopwatch]\non_loop = "warn"\n',
    '[ tool . "loopwatch" ]\non_loop = "warn"\n',
    "[tool.'loopwatch']\non_loop = 'warn'\n",
    '[tool]\nloopwatch = { on_loop = "warn" }\n',
    '[tool]\nloopwatch.on_loop = "warn"\n',
    'tool.loopwatch.on_loop = "warn"\n',
    'tool = { loopwatch = { on_loop = "warn" } }\n',
    '"tool".loopwatch.on_loop = "warn"\n',
    '[tool.loopwatch.repeated_call]\nstop_at = 5\n[tool.loopwatch]\non_loop = "warn"\n',
]


@pytest.mark.parametrize("text", SPELLINGS)
def test_every_spelling_of_the_table_is_found(tmp_path: Path, text: str) -> None:
    (tmp_path / "pyproject.toml").write_text(text + '[project]\nname = "x"\n')
    assert find_config_file(tmp_path) == tmp_path / "pyproject.toml"
    assert Config.load(start=tmp_path).on_loop == "warn"


def test_a_pyproject_without_the_table_is_passed_over(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "loopwatch-user"\ndependencies = ["loopwatch>=0.1"]\n'
        '[project.scripts]\nloopwatch = "x:y"\n[tool.ruff]\nline-length = 100\n'
        "[tool.loopwatchers]\nx = 1\n"
    )
    assert find_config_file(tmp_path) is None
