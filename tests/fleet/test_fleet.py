"""Fleet scale: columnar traces (Parquet, Arrow), the pipeline functions on a real
Dask job, and `loopwatch scan --engine dask` against the local scan, byte for byte."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
from runs import model, tool

from loopwatch import Config
from loopwatch.fleet import REPORT_COLUMNS, open_engine, scan_batches, scan_frame, scan_table
from loopwatch.scan import Scanner, scan_stream
from loopwatch.traces import InputError, TraceRun, read_runs
from loopwatch.traces.columnar import runs_from_table, runs_to_table

# the module, not the function `loopwatch.scan` that the package exports
scan_module = importlib.import_module("loopwatch.scan")
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason="no shared corpus beside the repo")


def _cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "loopwatch", "scan", *args], capture_output=True, timeout=300
    )


def _runs() -> list[dict[str, Any]]:
    looping: list[dict[str, Any]] = [model("search", tokens=30)]
    for _ in range(6):
        looping += tool("web_search", {"q": "paris weather"}, "18C cloudy")
    healthy = [model("hi"), *tool("read", {"path": "a"}, "text of a")]
    healthy += tool("read", {"path": "b"}, "text of b")
    unknown = [{"kind": "tool_call", "name": "x", "unknown": ["args"]}] * 3
    return [
        {"run_id": "loop", "outcome": "failed", "meta": {"team": "a"}, "events": looping},
        {"run_id": "ok", "events": healthy},
        {"run_id": "unknown-args", "events": unknown},
    ]


def _native(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [Scanner(Config()).scan(r).to_dict() for r in runs]


def test_a_table_reads_back_as_the_same_runs() -> None:
    runs = _runs()
    back = list(runs_from_table(runs_to_table(runs)))
    assert all(isinstance(r, TraceRun) for r in back)
    assert [r.to_dict() for r in back if isinstance(r, TraceRun)] == runs


def test_rows_in_any_order_are_put_back_in_step_order() -> None:
    table = runs_to_table(_runs())
    shuffled = table.take(list(reversed(range(table.num_rows))))
    back = [r.to_dict() for r in runs_from_table(shuffled) if isinstance(r, TraceRun)]
    # runs come in order of first row (now reversed), events by step
    assert [r["run_id"] for r in back] == ["unknown-args", "ok", "loop"]
    assert {r["run_id"]: r["events"] for r in back} == {r["run_id"]: r["events"] for r in _runs()}


def test_null_is_absent_not_empty() -> None:
    table = pa.table(
        {
            "run_id": ["r", "r", None],
            "step": [1, 0, 0],
            "kind": ["tool_result", "tool_call", "tool_call"],
            "name": ["s", "s", "s"],
            "text": [None, None, "x"],
        }
    )
    items = list(runs_from_table(table, "t.parquet"))
    errors = [i for i in items if isinstance(i, InputError)]
    assert len(errors) == 1 and "null 'run_id'" in errors[0].reason
    (run,) = [i for i in items if isinstance(i, TraceRun)]
    assert run.events == [{"kind": "tool_call", "name": "s"}, {"kind": "tool_result", "name": "s"}]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_columnar_files_scan_like_json_lines(tmp_path: Path, suffix: str) -> None:
    runs = _runs()
    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in runs))
    table = runs_to_table(runs)
    path = tmp_path / f"runs{suffix}"
    if suffix == ".parquet":
        pq.write_table(table, path)
    else:
        with pa.OSFile(str(path), "wb") as sink, pyarrow.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    a, b = _cli("--json", str(jsonl)), _cli("--json", str(path))
    assert a.returncode == b.returncode == 0, b.stderr
    assert a.stdout == b.stdout
    assert [orjson.loads(line)["verdict"] for line in b.stdout.splitlines()] == [
        "stop",
        "ok",
        "ok",
    ]


def test_a_table_without_the_required_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"trace": ["a"], "kind": ["model"]}), path)
    out = _cli("--json", str(path))
    assert out.returncode == 2 and out.stdout == b""
    assert b"no 'run_id' column" in out.stderr and b"Traceback" not in out.stderr


def test_a_run_split_across_files_is_reported_not_scanned_in_halves(tmp_path: Path) -> None:
    table = runs_to_table(_runs())
    pq.write_table(table.slice(0, 5), tmp_path / "a.parquet")
    pq.write_table(table.slice(5), tmp_path / "b.parquet")
    items = list(read_runs(str(tmp_path)))
    errors = [i for i in items if isinstance(i, InputError)]
    assert len(errors) == 1 and "continues here from an earlier file" in errors[0].reason
    assert str(tmp_path / "b.parquet") in str(errors[0])


def test_a_corrupt_parquet_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(b"PAR1" + b"\x00" * 64)
    out = _cli("--json", str(path))
    assert out.returncode == 2 and b"cannot read as Parquet/Arrow" in out.stderr
    assert b"Traceback" not in out.stderr


@pytest.mark.parametrize("first", [b"ARROW1", b"PAR1 and more", b"ARROW1\x00\x00 "])
def test_json_lines_whose_first_line_looks_like_a_magic_are_read_as_text(
    tmp_path: Path, first: bytes
) -> None:
    """Both columnar formats end with their magic too: a text file that merely starts
    like one (found by the fuzz test) is JSON Lines with a bad first line, which is
    reported while every run after it is scanned."""
    runs = _runs()
    path = tmp_path / "runs.jsonl"
    path.write_bytes(first + b"\n" + b"".join(orjson.dumps(r) + b"\n" for r in runs))
    out = _cli("--json", str(path))
    assert [orjson.loads(line)["run_id"] for line in out.stdout.splitlines()] == [
        r["run_id"] for r in runs
    ]
    assert f"{path}:1:".encode() in out.stderr and b"Traceback" not in out.stderr


def test_a_truncated_parquet_file_is_still_read_as_parquet(tmp_path: Path) -> None:
    full = tmp_path / "full.parquet"
    pq.write_table(runs_to_table(_runs()), full)
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    out = _cli("--json", str(cut))
    assert out.returncode == 2 and b"cannot read as Parquet/Arrow" in out.stderr
    assert b"Traceback" not in out.stderr


def test_missing_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(runs_to_table(_runs()), path)
    for name in ("pyarrow", "pyarrow.parquet", "pyarrow.ipc"):
        monkeypatch.setitem(sys.modules, name, None)
    (err,) = list(read_runs(str(path)))
    assert isinstance(err, InputError) and err.whole_file
    assert 'pip install "loopwatch[columnar]"' in err.reason


def test_pipeline_functions_agree_with_the_scanner() -> None:
    runs = _runs()
    table = runs_to_table(runs)
    out = scan_table(table)
    assert out.column_names == list(REPORT_COLUMNS)
    assert [orjson.loads(r) for r in out.column("report").to_pylist()] == _native(runs)
    assert out.column("verdict").to_pylist() == ["stop", "ok", "ok"]
    # Spark's mapInArrow hands a partition over in batches; a run may span them
    batches = table.to_batches(max_chunksize=4)
    assert len(batches) > 3
    got = pa.Table.from_batches(list(scan_batches(iter(batches))))
    assert got.equals(out)
    assert list(scan_batches(iter([]))) == []
    frame = scan_frame(table.to_pandas())
    assert frame["report"].map(orjson.loads).tolist() == _native(runs)


def test_a_batch_that_is_not_a_trace_raises() -> None:
    with pytest.raises(ValueError, match="no 'kind' column"):
        scan_table(pa.table({"run_id": ["a"]}))


def _corpus_runs(names: tuple[str, ...]) -> list[dict[str, Any]]:
    runs = read_runs([str(CORPUS / n) for n in names])
    return [r.to_dict() for r in runs if isinstance(r, TraceRun)]


@needs_corpus
def test_scan_frame_in_a_real_dask_dataframe_job() -> None:
    """The pipeline as a team would write it: partition events by run, map the scan."""
    dd = pytest.importorskip("dask.dataframe")
    runs = _corpus_runs(("codetracer_tb.jsonl", "bioagent.jsonl"))
    frame = runs_to_table(runs).to_pandas()
    events = dd.from_pandas(frame, npartitions=4).shuffle("run_id", npartitions=3)
    meta = scan_table(runs_to_table(runs[:1])).to_pandas().iloc[:0]
    reports = events.map_partitions(scan_frame, meta=meta).compute(scheduler="processes")
    got = sorted(reports["report"].map(orjson.loads).tolist(), key=lambda r: r["run_id"])
    assert got == sorted(_native(runs), key=lambda r: r["run_id"])


@needs_corpus
def test_engine_scan_of_the_corpus_is_byte_identical_to_the_local_scan() -> None:
    files = sorted(str(p) for p in CORPUS.glob("*.jsonl"))
    local = _cli("--json", "--jobs", "1", *files)
    engine = _cli("--json", "--engine", "dask", "--jobs", "2", *files)
    assert local.returncode == engine.returncode == 0, engine.stderr[-2000:]
    assert engine.stdout == local.stdout  # the same order too, not only after sorting
    # one line per run of the files, whatever the corpus holds today
    runs = sum(1 for f in files for line in Path(f).read_bytes().splitlines() if line.strip())
    assert engine.stdout.count(b"\n") == runs


def test_engine_keeps_input_errors_in_place() -> None:
    runs = _runs()
    items: list[TraceRun | InputError] = [
        TraceRun(r["run_id"], r["events"], r.get("meta", {}), {}, "x.jsonl", i)
        for i, r in enumerate(runs, 1)
    ]
    items.insert(1, InputError("x.jsonl", 9, "not JSON"))
    with open_engine("dask", workers=1) as client:
        got = list(scan_stream(iter(items), Config(), 1, client))
    local = list(scan_stream(iter(items), Config(), 1))
    assert [str(g) if isinstance(g, InputError) else g.to_dict() for g in got] == [
        str(g) if isinstance(g, InputError) else g.to_dict() for g in local
    ]
    assert isinstance(got[1], InputError)


def test_engine_address_needs_an_engine() -> None:
    out = _cli("--engine-address", "tcp://127.0.0.1:1", "x.jsonl")
    assert out.returncode == 2 and b"--engine-address needs --engine" in out.stderr


def _lines_file(tmp_path: Path) -> Path:
    """A native file with what a real one may hold between its runs."""
    lines = [b"\xef\xbb\xbf" + orjson.dumps(_runs()[0])]
    for i, r in enumerate(_runs() * 4):
        lines.append(orjson.dumps({**r, "run_id": f"{r['run_id']}-{i}"}))
        if i == 2:
            lines += [b"", b"not json", b'{"foo": 1}', b'{"run_id": "x", "events": 3}']
        if i == 5:
            lines.append(b'{"run_id": "bad-utf8 \xff", "events": []}')
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _as_comparable(items: list[Any]) -> list[Any]:
    return [str(i) if isinstance(i, InputError) else i.to_dict() for i in items]


def test_parallel_scans_read_native_files_in_ranges_exactly_as_one_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import concurrent.futures

    from loopwatch.traces.sniff import native_ranges

    path = _lines_file(tmp_path)
    monkeypatch.setattr(scan_module, "_RANGE_BYTES", 300)  # many ranges, cut mid-run
    assert len(native_ranges(str(path), 300) or []) > 5
    expected = _as_comparable(list(scan_stream(read_runs(str(path)), Config())))
    assert any("not json" in str(e) or "invalid JSON" in str(e) for e in expected)
    pooled = list(scan_module.scan_paths([str(path)], Config(), jobs=2))
    assert _as_comparable(pooled) == expected
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # any Executor is an engine
        threaded = list(scan_module.scan_paths([str(path)], Config(), 2, pool))
    assert _as_comparable(threaded) == expected


def test_a_worker_that_cannot_read_the_file_costs_time_not_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a remote cluster the workers may not see the input files: the range is read
    and scanned in the main process instead."""
    import concurrent.futures

    class Blind(concurrent.futures.ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            if fn is scan_module._scan_range:
                args = (args[0], "/no/such/file", *args[2:])
            return super().submit(fn, *args, **kwargs)

    path = _lines_file(tmp_path)
    monkeypatch.setattr(scan_module, "_RANGE_BYTES", 300)
    expected = _as_comparable(list(scan_stream(read_runs(str(path)), Config())))
    with Blind(2) as pool:
        got = list(scan_module.scan_paths([str(path)], Config(), 2, pool))
    assert _as_comparable(got) == expected


def test_the_readme_pipeline_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import re

    pytest.importorskip("dask.dataframe")
    page = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    lake = tmp_path / "lake" / "agent_events"
    lake.mkdir(parents=True)
    runs = _runs()
    pq.write_table(runs_to_table(runs[:2]), lake / "part-0.parquet")
    pq.write_table(runs_to_table(runs[2:]), lake / "part-1.parquet")
    monkeypatch.chdir(tmp_path)
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/fleet.md", "exec"), scope)
    reports = scope["reports"]
    assert dict(zip(reports["run_id"], reports["verdict"], strict=True)) == {
        "loop": "stop",
        "ok": "ok",
        "unknown-args": "ok",
    }


def test_joining_an_existing_cluster_with_columnar_input(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    path = tmp_path / "runs.parquet"
    pq.write_table(runs_to_table(_runs()), path)
    jsonl = _lines_file(tmp_path)
    local = _cli("--json", "--jobs", "1", str(path), str(jsonl))
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, dashboard_address=None, host="127.0.0.1"
    ) as cluster:
        joined = _cli(
            "--json", "--engine", "dask", "--engine-address", cluster.scheduler_address,
            str(path), str(jsonl),
        )  # fmt: skip
    assert joined.returncode == local.returncode == 0, joined.stderr[-2000:]
    assert joined.stdout == local.stdout and joined.stderr == local.stderr
    assert joined.stdout.count(b"\n") == 3 + 14  # the bad-UTF-8 run is read too


@needs_corpus
def test_guard_replay_of_parquet_runs_agrees_with_the_scan(tmp_path: Path) -> None:
    """What the columnar reader yields, replayed step by step through a guard, stops
    where the scan says (the same contract every other reader's fixture is held to)."""
    from loopwatch import Guard

    runs = _corpus_runs(("codetracer_tb.jsonl",))[:12]
    path = tmp_path / "runs.parquet"
    pq.write_table(runs_to_table(runs), path)
    read = [r for r in read_runs(str(path)) if isinstance(r, TraceRun)]
    assert [r.run_id for r in read] == [r["run_id"] for r in runs]
    stops = 0
    for run in read:
        guard = Guard(Config())
        actions = [guard.observe(run.run_id, ev).action for ev in run.events]
        first_stop = next((i for i, a in enumerate(actions) if a in ("stop", "skip")), None)
        first_warn = next((i for i, a in enumerate(actions) if a != "ok"), None)
        report = Scanner(Config()).scan(run)
        assert (first_warn, first_stop) == (report.first_warn, report.first_stop), run.run_id
        stops += first_stop is not None
    assert stops > 0  # the sample holds loops, so the comparison is not vacuous
