"""Detection quality on labelled traces: recall on loops, false alarms on healthy runs.

Usage::

    python benchmarks/quality.py [CORPUS.jsonl ...] [--scenarios FILE] [--config FILE]
                                 [--json | --markdown] [--show-solved-stops]

Defaults to every ``*.jsonl`` in ``../shared/corpus`` and the scenario file in
``tests/data``. Any corpus in the native format works; these fields are read:

* ``labels.loop``: true (a loop), false (explicitly not), null (unlabelled);
* task outcome in ``meta``: ``resolved`` true, ``reward`` == 1, ``task_solved`` true
  mark a run whose task was solved (stopping it would have been wrong);
* ``labels.first_step`` (else ``meta.loop_step`` / ``meta.mistake_event_i``): the
  event where a person reading the run calls it a loop, to report lateness: first
  stop minus that step (median and 90th percentile; negative = before it).

``--runs`` prints one line per labelled loop (first warn, first stop, labelled
step, stopping detector); ``--show`` prints the labelled loops that were not stopped,
with the labeller's evidence (``labels.detail``), to read the misses.

Prints one table with a column per file and a total. With targets
(``--min-recall-stop``, ``--min-source-recall-stop``, ``--min-recall-flag``,
``--max-false-stop-rate``, ``--max-false-warn-rate``, ``--max-lateness``) it prints
each one met or missed and exits 1 when any is missed, so CI or a tuning loop can
hold a detector change to them. ``--min-source-recall-stop`` applies to every file
with at least 5 labelled loops (fewer make a rate of little meaning).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

from loopwatch import Config, ConfigError, Scanner  # noqa: E402
from loopwatch.traces import InputError, read_runs  # noqa: E402


def labelled_step(run: dict[str, Any]) -> int | None:
    """The event index where a person calls the run a loop, if the corpus says."""
    labels = run.get("labels") or {}
    meta = run.get("meta") or {}
    for value in (labels.get("first_step"), meta.get("loop_step"), meta.get("mistake_event_i")):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def percentile(values: list[int], q: float) -> int | str:
    """The q-quantile (nearest rank) of a list, or '-' when it is empty."""
    if not values:
        return "-"
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def solved(meta: dict[str, Any]) -> bool | None:
    """True/False when the run's task outcome is known, else None."""
    if "resolved" in meta:
        return bool(meta["resolved"])
    if "reward" in meta and meta["reward"] is not None:
        return float(meta["reward"]) >= 1.0
    if "task_solved" in meta:
        return bool(meta["task_solved"])
    return None


@dataclass
class Tally:
    runs: int = 0
    events: int = 0
    loops: int = 0
    loops_stopped: int = 0
    loops_flagged: int = 0
    not_loops: int = 0
    false_stops: int = 0
    false_warns: int = 0
    solved: int = 0
    solved_stops: int = 0
    solved_loop_stops: int = 0  # solved runs stopped that a person labelled a loop
    solved_loop_counted: int = 0  # solved runs that a person labelled a loop
    solved_warns: int = 0
    unlabelled: int = 0
    unlabelled_stops: int = 0
    unlabelled_warns: int = 0
    missed: list[tuple[str, Any, Any]] = field(default_factory=list)  # id, detail, report
    delays: list[int] = field(default_factory=list)
    solved_stop_ids: list[str] = field(default_factory=list)
    missed_loop_ids: list[str] = field(default_factory=list)
    detectors: dict[str, int] = field(default_factory=dict)

    def add(self, run: dict[str, Any], report: Any) -> None:
        self.runs += 1
        self.events += len(run.get("events", []))
        label = (run.get("labels") or {}).get("loop")
        meta = run.get("meta") or {}
        verdict = report.verdict
        stopped = verdict == "stop"
        flagged = verdict != "ok"
        if stopped:
            for f in report.findings:
                if f.severity.value == "stop":
                    self.detectors[f.detector] = self.detectors.get(f.detector, 0) + 1
                    break
        if label is True:
            self.loops += 1
            self.loops_stopped += stopped
            self.loops_flagged += flagged
            if not stopped:
                self.missed_loop_ids.append(run["run_id"])
                self.missed.append((run["run_id"], (run.get("labels") or {}).get("detail"), report))
            at = labelled_step(run)
            if stopped and isinstance(at, int):
                self.delays.append(report.first_stop - at)
        elif label is False:
            self.not_loops += 1
            self.false_stops += stopped
            self.false_warns += flagged and not stopped
        else:
            self.unlabelled += 1
            self.unlabelled_stops += stopped
            self.unlabelled_warns += flagged and not stopped
        if solved(meta):
            self.solved += 1
            self.solved_loop_counted += label is True
            self.solved_stops += stopped
            self.solved_loop_stops += stopped and label is True
            self.solved_warns += flagged and not stopped
            if stopped:
                self.solved_stop_ids.append(run["run_id"])

    def merge(self, other: Tally) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            if isinstance(value, dict):
                for k, v in value.items():
                    mine[k] = mine.get(k, 0) + v
            elif isinstance(value, list):
                mine.extend(value)
            else:
                setattr(self, name, mine + value)

    def rates(self) -> dict[str, float | None]:
        """The rates the targets are stated in (None where there is nothing to count)."""

        def rate(n: int, d: int) -> float | None:
            return n / d if d else None

        solved_not_loops = self.solved - self.solved_loop_counted
        return {
            "recall_stop": rate(self.loops_stopped, self.loops),
            "recall_flag": rate(self.loops_flagged, self.loops),
            "false_stop": rate(self.false_stops, self.not_loops),
            # a warning goes into the model's context: any run labelled not-a-loop that
            # was warned (or stopped, which warns first) counts
            "false_warn": rate(self.false_warns + self.false_stops, self.not_loops),
            "solved_false_stop": rate(self.solved_stops - self.solved_loop_stops, solved_not_loops),
        }

    def row(self) -> dict[str, Any]:
        def rate(n: int, d: int) -> str:
            return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "-"

        return {
            "runs": self.runs,
            "events": self.events,
            "loop recall (stop)": rate(self.loops_stopped, self.loops),
            "loop recall (warn|stop)": rate(self.loops_flagged, self.loops),
            "false stops (loop=false)": rate(self.false_stops, self.not_loops),
            # warned or stopped (a stop is told first): the target is on this rate
            "false warnings (loop=false)": rate(
                self.false_warns + self.false_stops, self.not_loops
            ),
            "stops on solved runs": rate(self.solved_stops, self.solved),
            "  of which labelled loops": str(self.solved_loop_stops),
            # the target is on this one: a solved run nobody calls a loop, stopped
            "stops on solved runs not labelled loops": rate(
                self.solved_stops - self.solved_loop_stops,
                self.solved - self.solved_loop_counted,
            ),
            "warns on solved runs": rate(self.solved_warns, self.solved),
            "stops, unlabelled": rate(self.unlabelled_stops, self.unlabelled),
            "warns, unlabelled": rate(self.unlabelled_warns, self.unlabelled),
            "stop lateness vs labelled step (median)": percentile(self.delays, 0.5),
            "stop lateness vs labelled step (p90)": percentile(self.delays, 0.9),
            "stopping detector": ", ".join(
                f"{k} {v}" for k, v in sorted(self.detectors.items(), key=lambda x: -x[1])
            )
            or "-",
        }


def scenario_check(path: Path, scanner: Scanner) -> tuple[int, int, list[str]]:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import meets_expectation

    ok = total = 0
    failures = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        run = json.loads(line)
        report = scanner.scan(run)
        total += 1
        problem = meets_expectation(run["expect"], report.first_warn, report.first_stop)
        if problem:
            failures.append(f"{run['run_id']}: {problem}")
        else:
            ok += 1
    return ok, total, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", nargs="*", help="native JSONL corpus files")
    parser.add_argument(
        "--scenarios",
        nargs="*",
        default=[str(ROOT / "tests" / "data" / n) for n in ("conformance.jsonl", "intent.jsonl")],
    )
    parser.add_argument("--config", help="a loopwatch.toml to evaluate instead of the defaults")
    parser.add_argument("--json", action="store_true", help="print the totals as JSON")
    parser.add_argument(
        "--markdown", action="store_true", help="print the table as Markdown (docs/quality.md)"
    )
    parser.add_argument("--runs", action="store_true", help="one line per labelled loop")
    parser.add_argument(
        "--show", action="store_true", help="the labelled loops not stopped, with the evidence"
    )
    parser.add_argument(
        "--show-solved-stops", action="store_true", help="list solved runs that were stopped"
    )
    targets = parser.add_argument_group("targets (exit 1 when one is missed)")
    targets.add_argument("--min-recall-stop", type=float, help="labelled loops stopped, overall")
    targets.add_argument(
        "--min-source-recall-stop",
        type=float,
        help=f"labelled loops stopped, in each file with {SOURCE_MIN_LOOPS}+ labelled loops",
    )
    targets.add_argument("--min-recall-flag", type=float, help="labelled loops warned or stopped")
    targets.add_argument(
        "--max-false-stop-rate",
        type=float,
        help="stops on runs labelled not-a-loop, and on solved runs not labelled loops",
    )
    targets.add_argument(
        "--max-false-warn-rate",
        type=float,
        help="runs labelled not-a-loop that were warned or stopped",
    )
    targets.add_argument(
        "--max-lateness", type=float, help="median first stop minus the labelled step, in events"
    )
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.corpus] or sorted(
        (ROOT.parent / "shared" / "corpus").glob("*.jsonl")
    )
    try:
        config = Config.load(args.config) if args.config else Config()
    except (ConfigError, OSError) as bad:
        # the CLI's convention: a bad configuration is one line naming it, exit 2
        print(f"quality.py: {bad}", file=sys.stderr)
        return 2
    scanner = Scanner(config)

    total = Tally()
    tallies: dict[str, Tally] = {}
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:
        tally = Tally()
        for item in read_runs(str(path)):
            if isinstance(item, InputError):
                print(item, file=sys.stderr)
                continue
            run = item.to_dict()
            report = scanner.scan(run)
            tally.add(run, report)
            if args.runs and (run.get("labels") or {}).get("loop") is not None:
                top = report.top_finding
                print(
                    f"{'LOOP' if run['labels']['loop'] else 'not '} {run['run_id']}: "
                    f"events={len(run['events'])} labelled={labelled_step(run)} "
                    f"warn={report.first_warn} stop={report.first_stop} "
                    f"by={top.detector if top else '-'}"
                )
        rows[path.name] = tally.row()
        tallies[path.name] = tally
        total.merge(tally)
        if args.show_solved_stops and tally.solved_stop_ids:
            print(f"{path.name}: solved runs stopped: {', '.join(tally.solved_stop_ids)}")
    rows["TOTAL"] = total.row()

    ok = n = 0
    failures: list[str] = []
    for scenario_file in args.scenarios:
        if Path(scenario_file).is_file():
            f_ok, f_n, f_failures = scenario_check(Path(scenario_file), scanner)
            ok, n = ok + f_ok, n + f_n
            failures += f_failures
    scen = f"{ok}/{n} scenarios meet their expectation" if n else "no scenario file"

    verdicts = check_targets(args, total, tallies)
    if args.json:
        out = {"files": rows, "scenarios": scen, "failures": failures, "targets": verdicts}
        print(json.dumps(out, indent=2))
        return 1 if any(not ok for _, ok in verdicts) else 0
    metrics = list(rows["TOTAL"])
    if args.markdown:
        print_markdown(rows, metrics)
        print(f"\n{scen}")
        return 1 if any(not ok for _, ok in verdicts) else 0
    width = max(len(m) for m in metrics)
    cols = list(rows)
    colw = [max(len(c), *(len(str(rows[c][m])) for m in metrics)) for c in cols]
    print(" " * width + " | " + " | ".join(c.ljust(w) for c, w in zip(cols, colw, strict=True)))
    print("-" * (width + 3 + sum(w + 3 for w in colw)))
    for m in metrics:
        print(
            m.ljust(width)
            + " | "
            + " | ".join(str(rows[c][m]).ljust(w) for c, w in zip(cols, colw, strict=True))
        )
    print(f"\n{scen}")
    for f in failures:
        print(f"  FAIL {f}")
    if args.show:
        print("\nlabelled loops not stopped:")
        for run_id, detail, report in total.missed:
            top = report.top_finding
            said = f"warned at {report.first_warn} ({top.detector})" if top else "silent"
            print(f"- {run_id}: {said}\n    {detail}")
    elif total.missed_loop_ids:
        print(f"loops not stopped: {', '.join(total.missed_loop_ids)}")
    for line, ok in verdicts:
        print(f"{'met   ' if ok else 'MISSED'} {line}")
    return 1 if any(not ok for _, ok in verdicts) else 0


_MARKDOWN = {
    "runs": "runs",
    "loop recall (stop)": "loops stopped",
    "loop recall (warn|stop)": "loops warned or stopped",
    "false stops (loop=false)": "not-a-loop runs stopped",
    "false warnings (loop=false)": "not-a-loop runs warned or stopped",
    "stops on solved runs not labelled loops": "solved runs stopped (not loops)",
    "stop lateness vs labelled step (median)": "lateness, median",
    "stop lateness vs labelled step (p90)": "lateness, p90",
}


def print_markdown(rows: dict[str, dict[str, Any]], metrics: list[str]) -> None:
    """The table with a row per file (the files are the many, the metrics the few
    that fit a page), as docs/quality.md shows it."""
    shown = [m for m in metrics if m in _MARKDOWN]
    print("| file | " + " | ".join(_MARKDOWN[m] for m in shown) + " |")
    print("|---" * (len(shown) + 1) + "|")
    for name, row in rows.items():
        label = f"**{name}**" if name == "TOTAL" else name.removesuffix(".jsonl")
        print(f"| {label} | " + " | ".join(str(row[m]) for m in shown) + " |")


# A file's own recall target applies only from this many labelled loops on.
SOURCE_MIN_LOOPS = 5


def check_targets(
    args: argparse.Namespace, total: Tally, tallies: dict[str, Tally]
) -> list[tuple[str, bool]]:
    """Each target asked for on the command line, as (what was measured, met?)."""
    out: list[tuple[str, bool]] = []

    def at_least(name: str, value: float | None, floor: float | None) -> None:
        if floor is not None and value is not None:
            out.append((f"{name} {value:.3f} (target >= {floor})", value >= floor))

    def at_most(name: str, value: float | None, ceiling: float | None) -> None:
        if ceiling is not None and value is not None:
            out.append((f"{name} {value:.3f} (target <= {ceiling})", value <= ceiling))

    rates = total.rates()
    at_least("recall(stop), all", rates["recall_stop"], args.min_recall_stop)
    if args.min_source_recall_stop is not None:
        for name, tally in tallies.items():
            if tally.loops >= SOURCE_MIN_LOOPS:
                at_least(
                    f"recall(stop), {name}",
                    tally.rates()["recall_stop"],
                    args.min_source_recall_stop,
                )
    at_least("recall(warn|stop), all", rates["recall_flag"], args.min_recall_flag)
    at_most("false stops, runs labelled not-a-loop", rates["false_stop"], args.max_false_stop_rate)
    at_most(
        "false stops, solved runs not labelled loops",
        rates["solved_false_stop"],
        args.max_false_stop_rate,
    )
    at_most(
        "warned or stopped, runs labelled not-a-loop", rates["false_warn"], args.max_false_warn_rate
    )
    if args.max_lateness is not None and total.delays:
        median = float(statistics.median(total.delays))
        out.append(
            (f"median lateness {median:g} events (target <= {args.max_lateness:g})",
             median <= args.max_lateness)
        )  # fmt: skip
    return out


if __name__ == "__main__":
    raise SystemExit(main())
