"""Fuzzing the command line: random bytes, random JSON shapes and random configurations.

Whatever the input, ``loopwatch scan`` returns an exit status (0, 1 or 2), prints no
traceback, and every intact run in a file comes back, in order, whatever garbage
surrounds it. Whatever the configuration, loading it either works or raises
ConfigError, never another exception.
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loopwatch import Config, ConfigError, scan
from loopwatch.cli import main
from loopwatch.config import DETECTORS, _defaults

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INTACT = [
    {"run_id": f"intact-{i}", "events": [{"kind": "tool_call", "name": "s", "args": {"q": i}}] * 6}
    for i in range(3)
]


def run_cli(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


def scan_bytes(data: bytes, *options: str, name: str = "t.jsonl") -> tuple[int, str, str]:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        return run_cli(["scan", "--json", *options, str(path)])


def run_ids(out: str) -> list[str]:
    return [json.loads(line)["run_id"] for line in out.split("\n") if line.strip()]


# byte strings that look like the beginnings of JSON as well as noise
noise = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(
        [b"{", b"[", b"}", b"]", b'{"run_id":', b"\xef\xbb\xbf", b"\xff\xfe", b"\x00",
         b'"\\ud800"', b"[]", b"[1,2,3]", b"{}", b"null", b"1e999", b"\r", b"\\"]
    ),
)  # fmt: skip
garbage_line = st.lists(noise, max_size=6).map(lambda parts: b"".join(parts).replace(b"\n", b" "))


@FUZZ
@given(data=st.binary(max_size=2000), forced=st.sampled_from([None, "jsonl", "otlp", "langfuse"]))
def test_random_bytes_never_escape_as_an_exception(data: bytes, forced: str | None) -> None:
    options = ["--format", forced] if forced else []
    code, _out, err = scan_bytes(data, *options)
    assert code in (0, 1, 2)
    assert "Traceback" not in err


@FUZZ
@given(data=st.binary(max_size=1500))
def test_random_gzip_bytes_never_escape_as_an_exception(data: bytes) -> None:
    import gzip

    blob = bytearray(gzip.compress(data + b"\n" + json.dumps(INTACT[0]).encode()))
    if len(blob) > 30:
        blob[len(blob) // 2] ^= 0x5A  # a flipped byte inside the deflate stream
    code, _out, err = scan_bytes(bytes(blob), name="t.jsonl.gz")
    assert code in (0, 1, 2) and "Traceback" not in err


@FUZZ
@given(
    before=st.lists(garbage_line, max_size=80),
    between=st.lists(st.lists(garbage_line, max_size=5), min_size=2, max_size=2),
    after=st.lists(garbage_line, max_size=5),
    forced=st.sampled_from([None, "jsonl"]),
)
# found by CI: a text trace whose first line is SQLite's magic string was taken for a
# database, and none of its runs was read
@example(before=[b"SQLite format 3\x00"], between=[[], []], after=[], forced=None)
def test_intact_runs_survive_any_garbage_around_them(
    before: list[bytes],
    between: list[list[bytes]],
    after: list[bytes],
    forced: str | None,
) -> None:
    runs = [json.dumps(r).encode() for r in INTACT]
    lines = [*before, runs[0], *between[0], runs[1], *between[1], runs[2], *after]
    options = ["--format", forced] if forced else []
    code, out, err = scan_bytes(b"\n".join(lines) + b"\n", *options)
    assert "Traceback" not in err
    got = run_ids(out)
    # every intact run is read, in order; a garbage line may itself be a run
    assert [i for i in got if i.startswith("intact-")] == [r["run_id"] for r in INTACT]
    assert code in (0, 2)
    problems = [line.split(": ")[0] for line in err.split("\n") if line]
    assert len(problems) == len(set(problems))  # each line reported at most once


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
event = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {"kind": st.sampled_from(["tool_call", "tool_result", "model", "user", "span", "?"])},
        optional={
            "name": json_value,
            "args": json_value,
            "text": json_value,
            "id": json_value,
            "parent": json_value,
            "error": json_value,
            "tokens": json_value,
            "cost": json_value,
            "agent": json_value,
            "to": json_value,
        },
    ),
)


@FUZZ
@given(
    run_id=st.one_of(st.text(max_size=10), json_value),
    events=st.lists(event, max_size=30),
    depth=st.integers(min_value=0, max_value=600),
)
def test_any_json_shape_is_scanned_or_reported(run_id: Any, events: list[Any], depth: int) -> None:
    nested: Any = {"q": 1}
    for _ in range(depth):
        nested = {"k": nested}
    events = [*events, {"kind": "tool_call", "name": "deep", "args": nested}]
    record = {"run_id": run_id, "events": events}
    line = json.dumps(record).encode()
    code, out, err = scan_bytes(line + b"\n" + json.dumps(INTACT[1]).encode() + b"\n")
    assert "Traceback" not in err and code in (0, 2)
    got = run_ids(out)
    assert got[-1] == INTACT[1]["run_id"]
    if isinstance(run_id, str):  # a well-formed run: scanned, never lost
        assert len(got) == 2 and got[0] == run_id
        assert code == 0


def section_values() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-5, max_value=50),
        st.floats(min_value=-2, max_value=2, allow_nan=False),
        st.text(max_size=6),
        st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3),
        st.dictionaries(st.text(max_size=5), st.lists(st.integers(-2, 9), max_size=3), max_size=2),
    )


def config_mapping() -> st.SearchStrategy[dict[str, Any]]:
    top = st.fixed_dictionaries(
        {},
        optional={
            "on_loop": st.sampled_from(["stop", "skip", "warn", "halt", 3]),
            "max_iterations": section_values(),
            "store": st.one_of(
                st.sampled_from(["memory://", "redis://h/0", "x"]), section_values()
            ),
            "max_runs": section_values(),
            "ttl_seconds": st.one_of(
                st.sampled_from(["1h", "30m", "90s", "0s", "1h30m", "soon", "-1m"]),
                section_values(),
            ),
            "on_store_error": st.sampled_from(["allow", "raise", "explode"]),
            "exempt_tools": section_values(),
        },
    )
    sections = st.dictionaries(
        st.sampled_from(sorted(DETECTORS)),
        st.one_of(
            st.booleans(),
            section_values(),
            st.builds(
                dict,
                st.dictionaries(
                    st.sampled_from(
                        sorted(
                            {k for f, _ in DETECTORS.values() for k in _defaults(f)} | {"enabled"}
                        )
                    ),
                    section_values(),
                    max_size=4,
                ),
            ),
        ),
        max_size=4,
    )
    return st.builds(lambda a, b: {**a, **b}, top, sections)


RUN = {
    "run_id": "r",
    "events": [
        {"kind": "tool_call", "name": "s", "args": {"q": "x"}},
        {"kind": "tool_result", "name": "s", "text": "same"},
        {"kind": "model", "text": "thinking about it " * 3},
    ]
    * 8,
}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mapping=config_mapping())
def test_any_configuration_loads_or_is_a_config_error(mapping: dict[str, Any]) -> None:
    try:
        config = Config.from_mapping(mapping)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        return
    # accepted: it must build and scan (no error deferred to the first step)
    report = scan(RUN, config)
    assert report.verdict in ("ok", "warn", "stop")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mapping=config_mapping())
def test_any_configuration_file_gives_a_status_not_a_traceback(mapping: dict[str, Any]) -> None:
    lines = []
    top = {k: v for k, v in mapping.items() if k not in DETECTORS}
    for key, value in top.items():
        lines.append(f"{key} = {_toml(value)}")
    for key, value in mapping.items():
        if key in DETECTORS:
            if isinstance(value, dict):
                lines.append(f"[{key}]")
                lines += [f"{k} = {_toml(v)}" for k, v in value.items()]
            else:
                lines.insert(0, f"{key} = {_toml(value)}")
    with tempfile.TemporaryDirectory() as folder:
        conf = Path(folder) / "loopwatch.toml"
        conf.write_text("\n".join(lines) + "\n")
        runs = Path(folder) / "runs.jsonl"
        runs.write_text(json.dumps(RUN) + "\n")
        code, _out, err = run_cli(["scan", "--json", "--config", str(conf), str(runs)])
        assert code in (0, 2) and "Traceback" not in err
        if code == 2:
            assert len(err.strip().splitlines()) == 1 and err.startswith("loopwatch: ")
        code, _out, err = run_cli(["config", "--config", str(conf)])
        assert code in (0, 2) and "Traceback" not in err


def _toml(value: Any) -> str:
    """A TOML rendering of a fuzzed value (None becomes a string TOML cannot null)."""
    if value is None:
        return '"none"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return json.dumps(str(value))
