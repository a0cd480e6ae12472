"""The public API is curated: what a user composes is importable from ``loopwatch``,
and nothing else is, so a change to it is a decision, not an accident."""

from __future__ import annotations

import loopwatch
from loopwatch import Config, Detector
from loopwatch.config import DETECTORS

PUBLIC = {
    # the two doors, their configuration and what they answer
    "Guard", "scan", "Scanner", "Report", "Config", "ConfigError",
    "Action", "Finding", "Severity", "Verdict", "LoopDetected", "StoreUnavailable",
    # composing detectors
    "Detector", "DetectorSet", "default_detectors", "Embedder",
    "Chanting", "CostBudget", "Cycle", "ErrorLoop", "Frequency", "Futility",
    "IterationCap", "NameCycle", "NoEffect", "NoProgress", "PingPong", "Recursion",
    "RepeatedCall", "RepeatedInstruction", "RestatedReply", "RevisitedPage", "Semantic",
    "SpendVelocity", "Stagnation", "TimeBudget", "TokenBudget", "WaitBudget",
    # events, traces and stores
    "Event", "InputError", "TraceRun", "read_runs", "MemoryStore", "Store",
    # the decorator
    "watch", "current_run", "__version__",
}  # fmt: skip


def test_all_is_exactly_the_curated_api() -> None:
    assert set(loopwatch.__all__) == PUBLIC
    for name in loopwatch.__all__:
        assert hasattr(loopwatch, name), name


def test_every_detector_a_config_can_enable_is_importable_from_the_top() -> None:
    exported = {
        getattr(loopwatch, n)
        for n in loopwatch.__all__
        if isinstance(getattr(loopwatch, n), type) and issubclass(getattr(loopwatch, n), Detector)
    }
    built = {type(d) for d in Config().detectors()}
    assert built <= exported
    assert len(DETECTORS) >= len(built)


def test_verdicts_and_findings_survive_pickling_and_copying() -> None:
    """Scan workers send reports back to the main process, and users hand verdicts to
    other processes: a verdict (a slotted class, no longer a dataclass) and its
    findings must pickle and copy whole."""
    import copy
    import pickle

    from loopwatch import Action, Finding, Severity, Verdict

    finding = Finding("repeated_call", Severity.STOP, 7, (1, 3, 7), "the same call", "k")
    verdict = Verdict(Action.STOP, 7, (finding,), "stop", True, {"state_reset": "x"})
    for clone in (pickle.loads(pickle.dumps(verdict)), copy.deepcopy(verdict)):
        assert clone == verdict and clone is not verdict
        assert clone.findings[0] == finding and clone.extra == {"state_reset": "x"}
    assert pickle.loads(pickle.dumps(finding)) == finding
    assert Verdict(Action.OK, 1) != Verdict(Action.OK, 2)
    assert Verdict(Action.OK, 1).extra == {} and Verdict(Action.OK, 1).findings == ()


def test_the_exceptions_can_be_subclassed_with_other_bases() -> None:
    """Integrations and users subclass ``LoopDetected``, also with a framework's own
    exception as a second base (CrewAI's ``HookAborted``): the subclass is built through
    ``LoopDetected.__init__`` and carries the verdict. A class from a compiled module
    refused such an instance as ``self`` (a CrewAI stop that never raised)."""
    import pickle

    from loopwatch import Action, LoopDetected, StoreUnavailable, Verdict

    class FrameworkAbort(Exception):
        def __init__(self, reason: str) -> None:
            super().__init__(reason)
            self.reason = reason

    class Plain(LoopDetected):
        pass

    class Both(LoopDetected, FrameworkAbort):
        def __init__(self, verdict: Verdict) -> None:
            LoopDetected.__init__(self, verdict)
            self.reason = str(self)

    verdict = Verdict(Action.STOP, 4, (), "[loopwatch] Run stopped: the same call", True)
    for cls in (LoopDetected, Plain, Both):
        error = cls(verdict)
        assert error.verdict is verdict and str(error) == verdict.message, cls
        assert isinstance(error, RuntimeError)
    assert isinstance(Both(verdict), FrameworkAbort) and Both(verdict).reason == verdict.message
    assert str(Plain(Verdict(Action.STOP, 1))) == "loop detected"
    assert pickle.loads(pickle.dumps(StoreUnavailable("down"))).args == ("down",)

    class Mine(StoreUnavailable, OSError):
        pass

    assert str(Mine("down")) == "down"


def _source_docs() -> dict[str, str]:
    """``Class`` / ``Class.method`` / ``function`` -> docstring, from the sources of
    the public API (what the pure build shows and the compiled one must too)."""
    import ast
    from pathlib import Path

    docs: dict[str, str] = {}
    for name in loopwatch.__all__:
        obj = getattr(loopwatch, name)
        module = getattr(obj, "__module__", None)
        if not isinstance(module, str) or not module.startswith("loopwatch"):
            continue
        package = Path(loopwatch.__file__).parent
        source = package.joinpath(*module.split(".")[1:]).with_suffix(".py")
        if not source.exists():  # a package: loopwatch.detectors
            source = package.joinpath(*module.split(".")[1:], "__init__.py")
        for node in ast.parse(source.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
                if ast.get_docstring(node):
                    docs[name] = ast.get_docstring(node) or ""
                for item in getattr(node, "body", []) if isinstance(node, ast.ClassDef) else []:
                    if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
                        doc = ast.get_docstring(item)
                        if doc:
                            docs[f"{name}.{item.name}"] = doc
    return docs


def test_docstrings_and_signatures_show_in_this_build() -> None:
    """help(), IDEs that introspect and the docs read the same docstrings in both
    builds: mypyc drops them, and setup.py writes them back into the compiled C."""
    import inspect

    docs = _source_docs()
    assert {"Guard", "Guard.observe", "Guard.aobserve", "Verdict", "Finding", "scan"} <= set(docs)
    for dotted, doc in docs.items():
        obj = loopwatch
        for part in dotted.split("."):
            obj = getattr(obj, part)
        assert inspect.getdoc(obj) == doc, (dotted, loopwatch.compiled)
    for method in (loopwatch.Guard.observe, loopwatch.Guard.aobserve):
        assert list(inspect.signature(method).parameters) == ["self", "run_id", "event"]


def test_async_with_guard_closes_its_store() -> None:
    import asyncio
    from typing import Any

    closed: list[str] = []

    class Tracked(loopwatch.Store):  # a store of the user's: a MemoryStore that says so
        def __init__(self) -> None:
            self.inner = loopwatch.MemoryStore()

        def apply(self, run_id: str, fn: Any, factory: Any) -> Any:
            return self.inner.apply(run_id, fn, factory)

        def get(self, run_id: str) -> Any:
            return self.inner.get(run_id)

        def reset(self, run_id: str) -> None:
            self.inner.reset(run_id)

        def __len__(self) -> int:
            return len(self.inner)

        async def aclose(self) -> None:
            closed.append("aclose")

    async def main() -> str:
        async with loopwatch.Guard(Config(), store=Tracked()) as guard:
            verdict = await guard.aobserve("r", {"kind": "tool_call", "name": "s", "args": {}})
        return str(verdict.action)

    assert asyncio.run(main()) == "ok" and closed == ["aclose"]
