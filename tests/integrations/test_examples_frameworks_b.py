"""Each framework example in examples/ runs offline and loopwatch stops its stuck agent.

The examples are run as scripts, as a user would run them (``python examples/x.py``,
with the example's folder first on ``sys.path``), in a fresh interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["smolagents.py", "autogen.py", "llama_index.py"]


@pytest.mark.parametrize("name", NAMES)
def test_example_is_stopped_by_call_8(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_PROXY": "*"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # no loopwatch.toml from the repository
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    match = re.fullmatch(r"loopwatch: stopped at call (\d+)", last)
    assert match, done.stdout
    assert int(match.group(1)) <= 8
