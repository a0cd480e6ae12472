"""``loopwatch mcp``: the real MCP SDK's client, through the proxy (run as the command a
client would run), to real servers: the SDK-built server of tests/helpers/mcp_server.py
(over stdio and streamable HTTP) and ``@modelcontextprotocol/server-everything`` from
npm (scripts/services.d/mcp-servers.sh). What reaches the client through the proxy is
compared with what the same server answers directly; the guard's thresholds are pinned
in each test's loopwatch.toml (the defaults change). Every session runs under a
deadline, so a hang fails the test instead of the suite.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp import types
from mcp.client import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from mcp_server import ITEMS

from loopwatch.config import DETECTORS
from loopwatch.integrations.mcp import _Call, _result_event, refusal, with_notes

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
SERVER = [sys.executable, str(HELPERS / "mcp_server.py")]
PROXY = [sys.executable, "-m", "_loopwatch_entry", "mcp"]
EVERYTHING = shutil.which("mcp-server-everything")
needs_everything = pytest.mark.skipif(
    EVERYTHING is None, reason="mcp-server-everything not on PATH (scripts/services.d)"
)
DEADLINE = 120  # seconds for one test's sessions


def pinned(folder: Path, warn_at: int = 2, stop_at: int = 4, extra: str = "") -> Path:
    """A loopwatch.toml in ``folder`` where only RepeatedCall judges: a warning at the
    ``warn_at``-th identical call with the same result, a stop at the ``stop_at``-th."""
    lines = [extra]
    for name in DETECTORS:
        if name != "repeated_call":
            lines.append(f"[{name}]\nenabled = false\n")
    lines.append(
        f"[repeated_call]\nwarn_at = {warn_at}\nstop_at = {stop_at}\n"
        "window_warn_at = 0\nwindow_stop_at = 0\n"
    )
    (folder / "loopwatch.toml").write_text("\n".join(lines))
    return folder


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, **extra}


@asynccontextmanager
async def session(
    command: list[str], cwd: Path, errlog: Any = None, **options: Any
) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session with the server ``command`` starts."""
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=cwd,
                                   env=options.pop("environ", None) or env())  # fmt: skip
    async with (
        stdio_client(params, errlog=errlog or sys.stderr) as (read, write),
        ClientSession(read, write, read_timeout_seconds=60, **options) as client,
    ):
        await client.initialize()
        yield client


def run(body: Callable[[], Any]) -> Any:
    async def bounded() -> Any:
        with anyio.fail_after(DEADLINE):
            return await body()

    return anyio.run(bounded)


def texts(result: types.CallToolResult) -> list[str]:
    return [b.text for b in result.content if isinstance(b, types.TextContent)]


def dump(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True, exclude_none=True)


# -- pass-through ------------------------------------------------------------------------
async def python_server_answers(command: list[str], cwd: Path) -> dict[str, Any]:
    """Everything the test server answers a client: lists, reads, calls, progress."""
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with session(command, cwd) as client:
        init = client.initialize_result
        assert init is not None
        answers = {
            "server": dump(init.server_info),
            "capabilities": dump(init.capabilities),
            "instructions": init.instructions,
            "version": init.protocol_version,
            "tools": dump(await client.list_tools()),
            "resources": dump(await client.list_resources()),
            "templates": dump(await client.list_resource_templates()),
            "read": dump(await client.read_resource("memo://greeting")),
            "read_template": dump(await client.read_resource("memo://notes/todo")),
            "prompts": dump(await client.list_prompts()),
            "prompt": dump(await client.get_prompt("review", {"code": "x = 1"})),
            "echo": dump(await client.call_tool("echo", {"text": "héllo ✓"})),
            "fail": dump(await client.call_tool("fail", {"reason": "no"})),
            "picture": dump(await client.call_tool("picture", {})),
            "big": dump(await client.call_tool("big", {"size": 2_000_000})),
            "slow": dump(
                await client.call_tool("slow", {"steps": 3}, progress_callback=on_progress)
            ),
        }
        try:
            answers["unknown_tool"] = dump(await client.call_tool("no_such_tool", {}))
        except MCPError as exc:  # a protocol error, passed through as such
            answers["unknown_tool"] = exc.error.code
    answers["progress"] = progress
    return answers


def test_python_server_answers_the_same_through_the_proxy(tmp_path: Path) -> None:
    pinned(tmp_path)
    direct = run(lambda: python_server_answers(SERVER, tmp_path))
    proxied = run(lambda: python_server_answers([*PROXY, "--", *SERVER], tmp_path))
    assert proxied == direct
    assert direct["progress"] == [0, 1, 2]  # progress notifications came through
    assert len(direct["big"]["content"][0]["text"]) == 2_000_000
    assert direct["fail"]["isError"] is True


async def everything_answers(command: list[str], cwd: Path) -> dict[str, Any]:
    asked: list[Any] = []

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        asked.append(dump(params))
        return types.CreateMessageResult(role="assistant", model="scripted",
                                         content=types.TextContent(text="sampled: 42"))  # fmt: skip

    async with session(command, cwd, sampling_callback=sampling) as c:
        tools = await c.list_tools()
        names = sorted(t.name for t in tools.tools)
        resources = await c.list_resources()
        answers = {
            "tools": dump(tools),
            "prompts": dump(await c.list_prompts()),
            "prompt": dump(await c.get_prompt("args-prompt", {"city": "Paris"})),
            "resources": dump(resources),
            "read": dump(await c.read_resource(resources.resources[0].uri)),
            "echo": dump(await c.call_tool("echo", {"message": "hi"})),
            "sum": dump(await c.call_tool("get-sum", {"a": 2, "b": 40})),
            "image": dump(await c.call_tool("get-tiny-image", {})),
            "structured": dump(
                await c.call_tool("get-structured-content", {"location": "New York"})
            ),
            # the server asks the client to sample: a request the other way, answered
            "sampling": dump(
                await c.call_tool(
                    "trigger-sampling-request", {"prompt": "the answer?", "maxTokens": 5}
                )
            ),
            "complete": dump(
                await c.complete(
                    types.PromptReference(name="completable-prompt"),
                    {"name": "department", "value": "Eng"},
                )
            ),
        }
    answers["names"] = names
    answers["asked"] = asked
    return answers


@needs_everything
def test_everything_server_answers_the_same_through_the_proxy(tmp_path: Path) -> None:
    pinned(tmp_path)
    assert EVERYTHING is not None
    direct = run(lambda: everything_answers([EVERYTHING], tmp_path))
    proxied = run(lambda: everything_answers([*PROXY, "--", EVERYTHING], tmp_path))
    assert proxied == direct
    assert "trigger-sampling-request" in direct["names"]
    assert "sampled: 42" in json.dumps(direct["sampling"])
    assert direct["asked"]  # the server's request reached the client


# -- the guard ----------------------------------------------------------------------------
async def call_until_stopped(
    client: ClientSession, calls: int = 8, query: str = "weather"
) -> list[types.CallToolResult]:
    return [await client.call_tool("lookup", {"query": query}) for _ in range(calls)]


def forwarded(calls_file: Path) -> list[str]:
    return calls_file.read_text().split() if calls_file.exists() else []


def test_a_loop_is_warned_then_stopped_and_stays_stopped(tmp_path: Path) -> None:
    pinned(tmp_path, warn_at=2, stop_at=4)
    calls = tmp_path / "calls.txt"

    async def body() -> tuple[list[types.CallToolResult], types.CallToolResult]:
        async with session([*PROXY, "--", *SERVER], tmp_path,
                           environ=env(MCP_TEST_CALLS=str(calls))) as client:  # fmt: skip
            results = await call_until_stopped(client)
            after = await client.call_tool("next_item", {})  # another tool: refused too
        return results, after

    results, after = run(body)
    said = [" ".join(texts(r)) for r in results]
    stopped_at = next(i for i, t in enumerate(said) if "[loopwatch] Run stopped:" in t)
    assert stopped_at <= 3, said  # by the 4th identical call at the latest
    # a warning reached the model first, appended to a real result
    warned = [t for t in said[:stopped_at] if "[loopwatch] Warning:" in t]
    assert warned and all(t.startswith("No results for 'weather'.") for t in warned), said
    assert "repeated" in json.dumps(said[stopped_at]) or "lookup" in said[stopped_at]
    # after the stop, nothing reaches the server: every call is answered with the stop
    for result in [*results[stopped_at + 1 :], after]:
        assert result.is_error
        assert texts(result)[0].startswith("[loopwatch] Run stopped:")
        assert "lookup" in texts(result)[0]
    assert forwarded(calls) == ["lookup"] * len([r for r in results if not r.is_error])
    assert "next_item" not in forwarded(calls)


def test_progress_is_not_a_loop(tmp_path: Path) -> None:
    """The same call whose answer brings something new each time is never stopped."""
    pinned(tmp_path, warn_at=3, stop_at=4)

    async def body() -> list[types.CallToolResult]:
        async with session([*PROXY, "--", *SERVER], tmp_path) as client:
            return [await client.call_tool("next_item", {}) for _ in range(8)]

    results = run(body)
    assert [texts(r) for r in results] == [[item] for item in ITEMS]


def test_results_without_text_are_unknown_never_equal(tmp_path: Path) -> None:
    """An image-only result has no text to compare: the same call with such results is
    not judged a repeat of the same result (absent is not equal), while the same call
    with the same text result is stopped under the same thresholds."""
    pinned(tmp_path, warn_at=2, stop_at=3)

    async def body() -> tuple[list[types.CallToolResult], list[types.CallToolResult]]:
        async with session([*PROXY, "--", *SERVER], tmp_path) as client:
            pictures = [await client.call_tool("picture", {}) for _ in range(6)]
        async with session([*PROXY, "--", *SERVER], tmp_path) as client:
            lookups = await call_until_stopped(client, 6)
        return pictures, lookups

    pictures, lookups = run(body)
    assert not any(r.is_error for r in pictures)
    assert all(isinstance(r.content[0], types.ImageContent) for r in pictures)
    assert not any("[loopwatch] Run stopped" in " ".join(texts(r)) for r in pictures)
    assert any("[loopwatch] Run stopped" in " ".join(texts(r)) for r in lookups)


def test_skip_refuses_the_call_and_the_session_goes_on(tmp_path: Path) -> None:
    pinned(tmp_path, warn_at=2, stop_at=3, extra='on_loop = "skip"\n')
    calls = tmp_path / "calls.txt"

    async def body() -> tuple[list[types.CallToolResult], types.CallToolResult]:
        async with session([*PROXY, "--", *SERVER], tmp_path,
                           environ=env(MCP_TEST_CALLS=str(calls))) as client:  # fmt: skip
            looping = await call_until_stopped(client, 4)
            other = await client.call_tool("echo", {"text": "still here"})
        return looping, other

    looping, other = run(body)
    skipped = [r for r in looping if r.is_error]
    assert skipped and texts(skipped[0])[0].startswith("[loopwatch] This call was not executed.")
    assert texts(other) == ["still here"] and not other.is_error
    assert forwarded(calls).count("lookup") == len(looping) - len(skipped)


def test_a_run_id_in_a_shared_store_outlives_the_proxy(tmp_path: Path) -> None:
    """With a SQLite store and ``--run-id``, a client that reconnects (a new proxy
    process) goes on with the same run: its third identical call is stopped although
    it is the first of this session."""
    pinned(tmp_path, warn_at=2, stop_at=3, extra=f'store = "sqlite://{tmp_path / "s.db"}"\n')
    command = [*PROXY, "--run-id", "agent-7", "--", *SERVER]

    async def body() -> tuple[list[types.CallToolResult], types.CallToolResult]:
        async with session(command, tmp_path) as client:
            first = await call_until_stopped(client, 2)
        async with session(command, tmp_path) as client:
            again = await client.call_tool("lookup", {"query": "weather"})
        return first, again

    first, again = run(body)
    assert not any(r.is_error for r in first)
    assert again.is_error and texts(again)[0].startswith("[loopwatch] Run stopped:")


def test_a_cancelled_call_passes_through_and_the_session_goes_on(tmp_path: Path) -> None:
    """The client gives up on a long call (the SDK sends notifications/cancelled): the
    server gets the cancellation, and the session answers the next call at once."""
    pinned(tmp_path)
    calls = tmp_path / "calls.txt"

    async def body() -> tuple[list[str], bool]:
        async with session([*PROXY, "--", *SERVER], tmp_path,
                           environ=env(MCP_TEST_CALLS=str(calls))) as client:  # fmt: skip
            with anyio.move_on_after(0.5) as gave_up:
                await client.call_tool("slow", {"steps": 10_000})
            assert gave_up.cancelled_caught
            answer = texts(await client.call_tool("echo", {"text": "next"}))
            # while the session lasts (at its end the server would cancel it anyway)
            with anyio.move_on_after(20):
                while "slow-cancelled" not in forwarded(calls):
                    await anyio.sleep(0.05)
            return answer, "slow-cancelled" in forwarded(calls)

    answer, server_cancelled = run(body)
    assert answer == ["next"] and server_cancelled


def test_a_broken_configuration_lets_everything_through_and_says_so(tmp_path: Path) -> None:
    (tmp_path / "loopwatch.toml").write_text("on_lop = 'stop'\n")
    errors = tmp_path / "stderr.txt"

    async def body() -> list[types.CallToolResult]:
        with errors.open("w") as errlog:
            async with session([*PROXY, "--", *SERVER], tmp_path, errlog=errlog) as client:
                return await call_until_stopped(client, 6)

    results = run(body)
    assert [texts(r) for r in results] == [["No results for 'weather'."]] * 6
    said = errors.read_text()
    assert "not watching" in said and "on_lop" in said and "Traceback" not in said


# -- endings: crash, disconnect, malformed input, no server --------------------------------
def with_status(command: list[str], status_file: Path) -> list[str]:
    """``command`` under a shell that writes its exit status to ``status_file``."""
    script = '"$@"; echo $? > ' + str(status_file)
    return ["/bin/sh", "-c", script, "sh", *command]


def test_a_server_that_crashes_ends_the_session_with_its_status(tmp_path: Path) -> None:
    pinned(tmp_path)
    status, errors = tmp_path / "status", tmp_path / "stderr.txt"

    async def body() -> Any:
        with errors.open("w") as errlog:
            async with session(with_status([*PROXY, "--", *SERVER], status), tmp_path,
                               errlog=errlog) as client:  # fmt: skip
                assert texts(await client.call_tool("echo", {"text": "ok"})) == ["ok"]
                with pytest.raises(MCPError) as failed:
                    await client.call_tool("crash", {})
                return failed.value

    failed = run(body)
    assert "closed" in str(failed.error.message).lower()
    deadline = time.monotonic() + 30
    while not status.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status.read_text().strip() == "3"  # the server's exit status is the proxy's
    said = errors.read_text()
    assert "test server: crashing on purpose" in said  # the server's stderr, passed on
    assert "closed the connection with status 3" in said and "Traceback" not in said


def start_proxy(tmp_path: Path, *server: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*PROXY, "--", *(server or SERVER)], cwd=tmp_path,
                            env=env(MCP_TEST_PID=str(tmp_path / "server.pid")),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip


def message(model: Any) -> bytes:
    return (model.model_dump_json(by_alias=True, exclude_none=True) + "\n").encode()


INITIALIZE = types.JSONRPCRequest(
    jsonrpc="2.0", id=1, method="initialize",
    params={"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "test", "version": "0"}},
)  # fmt: skip


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_gone(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_a_client_that_disconnects_mid_call_ends_proxy_and_server(tmp_path: Path) -> None:
    pinned(tmp_path)
    proxy = start_proxy(tmp_path)
    assert proxy.stdin is not None and proxy.stdout is not None
    proxy.stdin.write(message(INITIALIZE))
    proxy.stdin.flush()
    assert json.loads(proxy.stdout.readline())["id"] == 1
    call = types.JSONRPCRequest(jsonrpc="2.0", id=2, method="tools/call",
                                params={"name": "slow", "arguments": {"steps": 1000}})  # fmt: skip
    proxy.stdin.write(message(call))
    proxy.stdin.close()  # the client goes away while the call runs
    try:
        proxy.wait(timeout=30)
    finally:
        proxy.kill()
    pid = int((tmp_path / "server.pid").read_text())
    assert wait_gone(pid), "the server outlived the proxy"
    assert proxy.returncode in (0, 143)  # the server's status: it ended, or was stopped
    assert b"Traceback" not in proxy.stderr.read()  # type: ignore[union-attr]


def test_a_malformed_message_gets_an_error_and_the_session_goes_on(tmp_path: Path) -> None:
    pinned(tmp_path)
    proxy = start_proxy(tmp_path)
    assert proxy.stdin is not None and proxy.stdout is not None
    try:
        proxy.stdin.write(b"this is not json\n")
        proxy.stdin.write(b'{"jsonrpc": "2.0", "method": 7}\n')
        proxy.stdin.write(message(INITIALIZE))
        proxy.stdin.flush()
        replies = [json.loads(proxy.stdout.readline()) for _ in range(3)]
        proxy.stdin.close()
        proxy.wait(timeout=30)
    finally:
        proxy.kill()
    errors = [r for r in replies if "error" in r]
    assert [e["id"] for e in errors] == [None, None]
    assert all(e["error"]["code"] == types.PARSE_ERROR for e in errors)
    [init] = [r for r in replies if "result" in r]
    assert init["id"] == 1 and init["result"]["serverInfo"]["name"] == "loopwatch-test-server"
    said = proxy.stderr.read().decode()  # type: ignore[union-attr]
    assert said.count("not JSON-RPC") == 2 and "Traceback" not in said
    assert proxy.returncode == 0


def test_stdin_that_is_not_a_pipe_is_read_too(tmp_path: Path) -> None:
    """A file (or a terminal) on stdin is read by a thread instead of the event loop:
    the messages are relayed, and the end of the file ends the session cleanly."""
    pinned(tmp_path)
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(message(INITIALIZE))
    with requests.open("rb") as stdin:
        proc = subprocess.run([*PROXY, "--", *SERVER], cwd=tmp_path, stdin=stdin,
                              capture_output=True, timeout=60, env=env())  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr


def one_line_failure(argv: list[str], cwd: Path) -> tuple[int, str]:
    proc = subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=60, env=env())  # fmt: skip
    assert proc.stdout == b""
    return proc.returncode, proc.stderr.decode()


def test_a_server_command_that_does_not_start(tmp_path: Path) -> None:
    code, said = one_line_failure([*PROXY, "--", "/no/such/mcp-server", "--flag"], tmp_path)
    assert code == 2
    assert said.count("\n") == 1, said
    assert "cannot start the MCP server '/no/such/mcp-server --flag'" in said
    assert "No such file or directory" in said


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_a_url_that_does_not_answer(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    code, said = one_line_failure([*PROXY, "--url", url], tmp_path)
    assert code == 2
    assert said.count("\n") == 1, said
    assert f"the MCP server at {url} does not answer" in said


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        ([], "give the server's command after --, or --url"),
        (["--url", "http://127.0.0.1:1/mcp", "--", "server"], "one of the two"),
        (["--header", "no colon", "--url", "http://127.0.0.1:1/mcp"], "is not 'Name: value'"),
    ],
)
def test_usage_errors_are_one_line(tmp_path: Path, argv: list[str], why: str) -> None:
    code, said = one_line_failure([*PROXY, *argv], tmp_path)
    assert code == 2 and said.count("\n") == 1 and why in said, said


def test_without_the_sdk_the_command_names_the_extra(tmp_path: Path) -> None:
    code = (
        "import sys\nsys.modules['mcp'] = None\n"
        "from _loopwatch_entry import main\nsys.exit(main(['mcp', '--', 'server']))\n"
    )
    status, said = one_line_failure([sys.executable, "-c", code], tmp_path)
    assert status == 2 and said.count("\n") == 1
    assert 'pip install "loopwatch[mcp]"' in said


def test_help_answers(tmp_path: Path) -> None:
    proc = subprocess.run([*PROXY, "--help"], capture_output=True, timeout=60)
    assert proc.returncode == 0 and b"--url" in proc.stdout


# -- streamable HTTP ----------------------------------------------------------------------
@asynccontextmanager
async def http_server(tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    process = subprocess.Popen([*SERVER, "http", str(port)], cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline and process.poll() is None, "no HTTP server"
            await anyio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


async def http_answers(client: ClientSession) -> dict[str, Any]:
    return {
        "tools": dump(await client.list_tools()),
        "prompt": dump(await client.get_prompt("review", {"code": "y"})),
        "read": dump(await client.read_resource("memo://greeting")),
        "echo": dump(await client.call_tool("echo", {"text": "over http"})),
    }


def test_streamable_http_server_through_the_proxy(tmp_path: Path) -> None:
    pinned(tmp_path, warn_at=2, stop_at=3)

    async def body() -> tuple[dict[str, Any], dict[str, Any], list[types.CallToolResult]]:
        async with http_server(tmp_path) as url:
            async with (
                streamable_http_client(url) as (read, write),
                ClientSession(read, write, read_timeout_seconds=60) as direct,
            ):
                await direct.initialize()
                expected = await http_answers(direct)
            async with session([*PROXY, "--url", url, "--header", "X-Test: yes"],
                               tmp_path) as proxied:  # fmt: skip
                got = await http_answers(proxied)
                looping = await call_until_stopped(proxied, 5)
        return expected, got, looping

    expected, got, looping = run(body)
    assert got == expected
    assert any("[loopwatch] Run stopped:" in " ".join(texts(r)) for r in looping)
    assert looping[-1].is_error


def test_the_2026_stateless_protocol_over_http(tmp_path: Path) -> None:
    """A client on the 2026-07-28 revision (no session: each request names its
    version, method and tool in HTTP headers, which the proxy sets as a client session
    would) reaches the HTTP server through the proxy, and its loop is stopped."""
    pinned(tmp_path, warn_at=2, stop_at=3)
    version = MODERN_PROTOCOL_VERSIONS[-1]

    async def body() -> tuple[list[str], list[types.CallToolResult]]:
        async with http_server(tmp_path) as url:
            params = StdioServerParameters(command=PROXY[0], args=[*PROXY[1:], "--url", url],
                                           cwd=tmp_path, env=env())  # fmt: skip
            async with Client(params, mode=version) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                calls = [await client.call_tool("lookup", {"query": "x"}) for _ in range(5)]
        return names, calls

    names, calls = run(body)
    assert "lookup" in names
    assert texts(calls[0]) == ["No results for 'x'."]
    assert any("[loopwatch] Run stopped:" in " ".join(texts(r)) for r in calls)
    assert calls[-1].is_error


# -- the docs page's snippet -------------------------------------------------------------
def test_the_docs_snippet_runs_and_stops_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/integrations/mcp.md's Python block, as written, with the test server as
    ``server_command`` and ``loopwatch`` on PATH."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "integrations" / "mcp.md").read_text()
    marker = "<!-- run-by: tests/integrations/test_mcp_proxy.py -->\n```python\n"
    code = page.split(marker, 1)[1].split("```", 1)[0]
    pinned(tmp_path, warn_at=2, stop_at=4)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    exec(compile(code, "docs/integrations/mcp.md", "exec"), {"server_command": SERVER})
    out = capsys.readouterr().out
    assert out.startswith("True [loopwatch] Run stopped: You called lookup("), out


# -- the result as the client gets it ------------------------------------------------------
def test_a_refusal_is_a_plain_error_result() -> None:
    result = types.CallToolResult.model_validate(refusal("[loopwatch] Run stopped: x"))
    assert result.is_error and texts(result) == ["[loopwatch] Run stopped: x"]


def test_notes_are_appended_and_nothing_else_changes() -> None:
    original = {"content": [{"type": "image", "data": "AA==", "mimeType": "image/png"}],
                "structuredContent": {"a": 1}, "isError": False, "_meta": {"k": "v"}}  # fmt: skip
    noted = with_notes(original, ["[loopwatch] Warning: w"])
    changed = ("content", "structuredContent")
    assert {k: v for k, v in noted.items() if k not in changed} == {
        k: v for k, v in original.items() if k not in changed
    }
    assert noted["content"][:1] == original["content"]
    assert noted["content"][1] == {"type": "text", "text": "[loopwatch] Warning: w"}
    # clients that show the model the structured content alone see it there too
    assert noted["structuredContent"] == {"a": 1, "loopwatch": "[loopwatch] Warning: w"}
    assert original["structuredContent"] == {"a": 1} and len(original["content"]) == 1
    # a schema that allows no other key: the text blocks alone carry it
    strict = with_notes(original, ["[loopwatch] Warning: w"], structured=False)
    assert strict["structuredContent"] == {"a": 1} and len(strict["content"]) == 2


# -- the event a result becomes --------------------------------------------------------------
TEXT = st.text(max_size=20).map(lambda t: {"type": "text", "text": t})
IMAGE = st.just({"type": "image", "data": "AA==", "mimeType": "image/png"})
AUDIO = st.just({"type": "audio", "data": "AA==", "mimeType": "audio/wav"})
BLOB = st.just({"type": "resource", "resource": {"uri": "file:///b", "blob": "AA=="}})
EMBEDDED = st.text(max_size=20).map(
    lambda t: {"type": "resource", "resource": {"uri": "file:///t", "text": t}}
)
LINK = st.just({"type": "resource_link", "uri": "file:///l", "name": "l"})


@given(
    blocks=st.lists(st.one_of(TEXT, IMAGE, AUDIO, BLOB, EMBEDDED, LINK), max_size=5),
    structured=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers())),
    is_error=st.booleans(),
)
def test_a_result_without_text_is_unknown_never_empty(
    blocks: list[dict[str, Any]], structured: Any, is_error: bool
) -> None:
    result: dict[str, Any] = {"content": blocks, "isError": is_error}
    if structured is not None:
        result["structuredContent"] = structured
    event = _result_event(_Call("t", "7"), result, "")
    textual = [b for b in blocks if b["type"] in ("text", "resource_link")
               or (b["type"] == "resource" and "text" in b["resource"])]  # fmt: skip
    assert event["error"] is is_error and event["id"] == "7" and event["name"] == "t"
    if textual or structured is not None or not blocks:
        assert "unknown" not in event and isinstance(event["text"], str)
        for block in blocks:
            if block["type"] == "text":
                assert block["text"] in event["text"]
    else:  # images, audio, blobs only: nothing to compare
        assert event["unknown"] == ["text"] and "text" not in event


def test_a_protocol_error_is_a_failed_result_with_its_message() -> None:
    event = _result_event(_Call("t", "1"), None, "Unknown tool: t")
    assert event == {"kind": "tool_result", "name": "t", "id": "1", "error": True,
                     "text": "Unknown tool: t"}  # fmt: skip
