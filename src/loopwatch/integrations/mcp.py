"""An MCP proxy: ``loopwatch mcp -- <server command> [args]`` (or ``--url <endpoint>``).

Any MCP client (Claude Desktop and Claude Code, Cursor, VS Code, Gemini CLI, an agent
built on an MCP SDK) starts the proxy where it would start the server; the proxy starts
the server (or connects to its streamable-HTTP endpoint) and relays every message both
ways. Each ``tools/call`` and its result go through one :class:`~loopwatch.Guard`, one
run per client session (one proxy process; ``--run-id`` names it, so that a shared
store keeps it across restarts):

* a ``tool_call`` event (the tool's name and arguments) before the call is forwarded.
  On ``skip`` or ``stop`` the call is not forwarded: the client gets a normal
  ``CallToolResult`` with ``isError: true`` and loopwatch's sentence as its text, so the
  model reads why;
* a ``tool_result`` event (the result's text, ``error`` from ``isError``) when the
  server answers. A result with no text at all (images, audio, blobs only) is
  ``"unknown": ["text"]``, never the empty string: absent is not equal;
* a ``warn`` (on the call or on its result) is appended to the result as one more text
  block (and under a ``loopwatch`` key of its structured content, which some clients
  show the model instead of the text: :func:`with_notes`), so the model reads it with
  the result; a ``stop`` on the result is appended the same way, and every later call
  of the session is refused with the stop's message;
* a call whose stop is certain whatever its result (the third no-op in a row) is
  refused before it runs, as the coding-agent hooks do
  (:func:`loopwatch.hooks._dispatch.foresee`).

The proxy sees calls and results, not the model's text: a call that follows a result
starts a new model turn, recorded as a ``model`` event whose text is unknown, as the
hooks and the transcript readers do.

Why a relay of the SDK's transports rather than a server in front of a client session.
The SDK's low-level ``Server`` forwarding to a ``ClientSession`` would re-implement
every method on the way through: each request, notification and capability must be
declared on the proxy's server and parsed into the proxy's protocol version's types,
so whatever the proxy's SDK does not know (a newer protocol revision's method, an
experimental capability, a vendor extension, a field added to a result) would be
dropped or refused, cancellation and progress would have to be re-mapped between two
sessions' request ids, and requests the server sends the client (sampling,
elicitation, roots) would need a forwarding handler each. The proxy instead joins
two of the SDK's own transports (``stdio_server`` towards the client;
``stdio_client`` or ``streamable_http_client`` towards the server) and passes their
:class:`~mcp.shared.message.SessionMessage` objects across unchanged: the SDK frames,
parses and validates every JSON-RPC message (a malformed one arrives as an
exception, reported on stderr), ids are kept, and the proxy reads only two things,
``tools/call`` requests and the responses to them, through the SDK's types
(``CallToolRequestParams``, ``CallToolResult``, ``TextContent``). Towards a
streamable-HTTP server it also sets the per-message HTTP headers a client session
would (``MCP-Protocol-Version``, and on the 2026 revision ``Mcp-Method``,
``Mcp-Name`` and the ``Mcp-Param-*`` headers of a tool's schema), with the SDK's
helpers.

The server's stderr is the proxy's stderr, and its exit status the proxy's (when the
server exits first, the client's pending requests get an error and the proxy exits
with it). The proxy never takes the client down: a loopwatch configuration it cannot
load, or a failure of the guard, lets every call through and says so on stderr.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, cast

from ..errors import StoreUnavailable
from ..guard import Guard
from ..hooks._dispatch import foresee
from ._common import STOPPED, _json, aobserve_safely, missing_extra

try:
    import anyio
    import anyio.from_thread
    import anyio.lowlevel
    import httpx2
    import mcp.client.stdio as sdk_stdio
    import mcp.types as types
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.server.stdio import stdio_server
    from mcp.shared.inbound import (
        MCP_METHOD_HEADER,
        MCP_NAME_HEADER,
        MCP_PROTOCOL_VERSION_HEADER,
        NAME_BEARING_METHODS,
        encode_header_value,
        mcp_param_headers,
        x_mcp_header_map,
    )
    from mcp.shared.message import ClientMessageMetadata, SessionMessage
    from mcp.types.version import MODERN_PROTOCOL_VERSIONS
except ModuleNotFoundError as exc:  # pragma: no cover - exercised by test_integration_extras
    raise missing_extra(exc, "mcp", "the MCP SDK (mcp)") from exc

__all__ = ["Judge", "main", "serve"]

_PROG: Final = "loopwatch mcp"
_AFTER_STOP: Final = " Every later call to this server's tools is refused in this session."
_TOOLS_CALL: Final = "tools/call"
_CANCELLED: Final = "notifications/cancelled"
# Exit status when the proxy itself could not do its job (the server did not start,
# the URL does not answer): a usage or input error for the CLI (CONTRIBUTING.md).
_CANNOT_START: Final = 2

# The server process ``stdio_client`` spawns, for its exit status (see _capture_spawns).
_SPAWNED: ContextVar[list[Any] | None] = ContextVar("loopwatch_mcp_spawned", default=None)


def _say(message: str) -> None:
    """One line on stderr: the MCP client logs a server's stderr for its user."""
    with contextlib.suppress(Exception):
        print(f"{_PROG}: {message}", file=sys.stderr, flush=True)


# -- the guard's side: events in, what to tell the client out ------------------------
@dataclass
class _Call:
    """A ``tools/call`` forwarded to the server and not answered yet."""

    name: str
    event_id: str
    warning: str = ""  # the call's own verdict's warning, shown with its result
    observed: bool = True  # False for a 2026 continuation (input responses)


class Judge:
    """What the proxy asks the guard, with no I/O: one client session's run.

    ``call`` returns the refusal to answer instead of forwarding (``None``: forward);
    ``result`` returns the sentences to append to the server's result. One lock: the
    client's and the server's messages arrive on two tasks, and the run's events must
    be observed in one order.
    """

    def __init__(self, guard: Guard | None, run_id: str) -> None:
        self.guard = guard
        self.run_id = run_id
        self.stopped = ""  # the stop's message, once the run is stopped
        self._pending: dict[Any, _Call] = {}
        self._last_kind = ""
        self._lock = anyio.Lock()

    async def _observe(self, event: Mapping[str, Any]) -> Any:
        assert self.guard is not None
        try:
            verdict = await aobserve_safely(self.guard, self.run_id, event)
        except StoreUnavailable as exc:  # on_store_error = "raise": still never the client's
            _say(f"the state store failed, this step is let through: {exc}")
            return None
        if not verdict.state_available or "error" in verdict.extra:
            _say(verdict.message or "the guard could not judge this step; let through")
        return verdict

    async def call(self, request_id: Any, params: Mapping[str, Any] | None) -> str | None:
        """A ``tools/call`` from the client: ``None`` to forward it, else the refusal."""
        parsed = _call_params(params)
        if parsed is None:  # not a call the server would accept: its error will say why
            return None
        name, arguments, continuation = parsed
        event_id = str(request_id)
        async with self._lock:
            if self.stopped:
                return self.stopped + _AFTER_STOP
            if self.guard is None or continuation:
                self._pending[request_id] = _Call(name, event_id, observed=not continuation)
                return None
            if self._last_kind != "tool_call":
                # the proxy never sees what the model said: the turn's output is unknown
                await self._observe({"kind": "model", "unknown": ["text"]})
            event = {"kind": "tool_call", "name": name, "args": arguments, "id": event_id}
            self._last_kind = "tool_call"
            verdict = await self._observe(event)
            action = str(verdict.action) if verdict is not None else "ok"
            message = (verdict.message or "") if verdict is not None else ""
            if action in ("ok", "warn"):
                ahead = foresee(self.guard, self.run_id, event)
                if ahead is not None and ahead.action in ("skip", "stop"):
                    action, message = ahead.action, ahead.message
            if action == "stop":
                self.stopped = message or STOPPED
                return self.stopped
            if action == "skip":
                self._last_kind = "tool_result"  # the model gets an answer: a new turn next
                return message or STOPPED
            self._pending[request_id] = _Call(name, event_id, message if action == "warn" else "")
            return None

    async def cancelled(self, request_id: Any) -> None:
        """The client cancelled a call: it may or may not have run, so its result is
        unknown (never equal to another)."""
        call = self._pending.pop(request_id, None)
        if call is None or not call.observed or self.guard is None:
            return
        async with self._lock:
            self._last_kind = "tool_result"
            await self._observe({"kind": "tool_result", "name": call.name, "id": call.event_id,
                                 "unknown": ["text"]})  # fmt: skip

    def is_pending(self, request_id: Any) -> bool:
        return request_id in self._pending

    async def result(
        self, request_id: Any, result: Mapping[str, Any] | None, error: str = ""
    ) -> list[str]:
        """The server answered a pending call (``result`` None: with a JSON-RPC error,
        whose message is ``error``): the sentences to add to the answer, warnings and a
        stop."""
        call = self._pending.pop(request_id, None)
        if call is None:
            return []
        if result is not None and _needs_more_input(result):
            return []  # 2026: the server asks for input; the retry carries the result
        notes = [call.warning] if call.warning else []
        if self.guard is None:
            return notes
        async with self._lock:
            self._last_kind = "tool_result"
            verdict = await self._observe(_result_event(call, result, error))
            if verdict is None:
                return notes
            action, message = str(verdict.action), verdict.message or ""
            if action == "stop" and not self.stopped:
                self.stopped = message or STOPPED
            if action in ("warn", "stop") and message and message not in notes:
                notes.append(message)
            return notes


def _call_params(params: Mapping[str, Any] | None) -> tuple[str, dict[str, Any], bool] | None:
    """A call's tool name and arguments, and whether it continues an earlier call (a
    2026 retry carrying the client's input responses); None when the SDK's type
    refuses the params."""
    try:
        parsed = types.CallToolRequestParams.model_validate(params or {}, by_name=False)
    except Exception:
        return None
    continuation = parsed.input_responses is not None or parsed.request_state is not None
    return parsed.name, dict(parsed.arguments or {}), continuation


def _needs_more_input(result: Mapping[str, Any]) -> bool:
    return result.get("resultType") == "input_required"


def _result_event(call: _Call, result: Mapping[str, Any] | None, error: str) -> dict[str, Any]:
    """The ``tool_result`` event of a call's answer (``None``: a JSON-RPC error, whose
    message is what the client, and so the model, reads of it)."""
    event: dict[str, Any] = {"kind": "tool_result", "name": call.name, "id": call.event_id}
    if result is None:
        event["error"] = True
        event["text"] = error
        return event
    try:
        parsed = types.CallToolResult.model_validate(result, by_name=False)
    except Exception:  # not a CallToolResult (a task handle): what it says is unknown
        event["unknown"] = ["text"]
        return event
    event["error"] = bool(parsed.is_error)
    text = _text_of(parsed)
    if text is None:
        event["unknown"] = ["text"]
    else:
        event["text"] = text
    return event


def _text_of(result: types.CallToolResult) -> str | None:
    """The text a model reads in a result; None when it holds none at all (images,
    audio, blobs): unknown, not empty."""
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.EmbeddedResource):
            if isinstance(block.resource, types.TextResourceContents):
                parts.append(block.resource.text)
        elif isinstance(block, types.ResourceLink):
            parts.append(str(block.uri))
    if parts:
        return "\n".join(parts)
    if result.structured_content is not None:
        return _json(result.structured_content)
    return None if result.content else ""


def refusal(message: str) -> dict[str, Any]:
    """The ``CallToolResult`` the client gets for a call loopwatch did not forward."""
    result = types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def with_notes(
    result: Mapping[str, Any], notes: Sequence[str], structured: bool = True
) -> dict[str, Any]:
    """The server's result with loopwatch's sentences added, every other field as the
    server wrote it: as more text blocks, and (``structured``) under a ``loopwatch``
    key of the structured content too.

    Why both: a client that has structured content may show the model only that
    (Claude Code does), and the sentences must reach the model. ``structured`` is False
    when the tool's output schema forbids other keys: the client would refuse the
    result, so the text blocks carry the sentences alone there.
    """
    content = result.get("content")
    blocks = list(content) if isinstance(content, list) else []
    blocks += [types.TextContent(text=n).model_dump(by_alias=True, exclude_none=True)
               for n in notes]  # fmt: skip
    out = {**result, "content": blocks}
    data = result.get("structuredContent")
    if structured and isinstance(data, dict) and "loopwatch" not in data:
        out["structuredContent"] = {**data, "loopwatch": " ".join(notes)}
    return out


# -- the relay -------------------------------------------------------------------------
class _Http:
    """What a client session would put in the HTTP headers of each message to a
    streamable-HTTP server: the negotiated protocol version, and on the 2026 revision
    the method, the name and a tool's ``Mcp-Param-*`` headers (from its schema in the
    last ``tools/list``)."""

    def __init__(self) -> None:
        self.version: str | None = None
        self.tool_headers: dict[str, dict[tuple[str, ...], str]] = {}

    def metadata(self, message: Any) -> ClientMessageMetadata | None:
        params = getattr(message, "params", None)
        meta = params.get("_meta") if isinstance(params, dict) else None
        version = meta.get(types.PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
        version = version if isinstance(version, str) else self.version
        method = getattr(message, "method", None)
        if method == "initialize" or version is None:
            return None
        headers = {MCP_PROTOCOL_VERSION_HEADER: version}
        if version in MODERN_PROTOCOL_VERSIONS and isinstance(method, str):
            headers[MCP_METHOD_HEADER] = method
            key = NAME_BEARING_METHODS.get(method)
            name = params.get(key) if key is not None and isinstance(params, dict) else None
            if isinstance(name, str):
                headers[MCP_NAME_HEADER] = encode_header_value(name)
                arguments = params.get("arguments") if isinstance(params, dict) else None
                header_map = self.tool_headers.get(name) if method == _TOOLS_CALL else None
                if header_map and isinstance(arguments, dict):
                    headers.update(mcp_param_headers(header_map, arguments))
        return ClientMessageMetadata(headers=headers)

    def answered(self, method: str, result: Mapping[str, Any]) -> None:
        if method == "initialize":
            version = result.get("protocolVersion")
            self.version = version if isinstance(version, str) else self.version
        elif method == "tools/list":
            for tool in result.get("tools") or ():
                if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                    with contextlib.suppress(Exception):
                        self.tool_headers[tool["name"]] = x_mcp_header_map(tool.get("inputSchema"))


class _PipeLines:
    """The client's messages, one line each, read from a pipe (or socket) without a
    thread: the descriptor is made non-blocking and read when the event loop says it
    is readable.

    Not ``anyio.wrap_file`` (what ``stdio_server`` reads and writes with by default):
    it moves every read, write and flush to a worker thread, three thread hand-offs
    per tool call (a millisecond and more on a busy machine, the better part of the
    proxy's overhead), and a read blocked in a worker thread cannot be cancelled, so
    a proxy whose server exited would wait for the client's next line to exit.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._eof = False
        self._closed = False
        self._waiting: anyio.CancelScope | None = None

    def close(self) -> None:
        """End the iteration now, even while it waits for the client."""
        self._closed = True
        if self._waiting is not None:
            self._waiting.cancel()

    def __aiter__(self) -> _PipeLines:
        return self

    async def __anext__(self) -> str:
        while True:
            if self._closed:
                raise StopAsyncIteration
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return line.decode("utf-8", "replace")
            self._scanned = len(self._buffer)
            if self._eof:
                if self._buffer:
                    rest, self._buffer = bytes(self._buffer), bytearray()
                    return rest.decode("utf-8", "replace")
                raise StopAsyncIteration
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                with anyio.CancelScope() as self._waiting:
                    await anyio.wait_readable(self.fd)
                self._waiting = None
                continue
            except OSError:
                chunk = b""
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True


class _PipeWriter:
    """The client's side of stdout, written without a thread (see :class:`_PipeLines`);
    a client that left is a closed stream, not an error."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    async def write(self, text: str) -> None:
        view = memoryview(text.encode("utf-8"))
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self.fd)
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise anyio.BrokenResourceError from exc

    async def flush(self) -> None:
        """Nothing is buffered: every write went to the pipe."""


class _StdinLines:
    """The client's messages read by a daemon thread, where stdin is not a pipe or a
    socket (a terminal, a file, Windows): cancellation abandons the thread instead of
    waiting for its read."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        send, receive = anyio.create_memory_object_stream[str](64)
        self._send: MemoryObjectSendStream[str] = send
        self._receive: MemoryObjectReceiveStream[str] = receive

    def start(self) -> None:
        token = anyio.lowlevel.current_token()
        threading.Thread(target=self._read, args=(token,), daemon=True,
                         name="loopwatch-mcp-stdin").start()  # fmt: skip

    def _read(self, token: Any) -> None:
        try:
            for raw in self._stream:
                line = raw.decode("utf-8", "replace")
                anyio.from_thread.run(self._send.send, line, token=token)
        except Exception:  # the loop is gone (the proxy is exiting), or stdin failed
            pass
        with contextlib.suppress(Exception):
            anyio.from_thread.run_sync(self._send.close, token=token)

    def close(self) -> None:
        self._receive.close()

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None


def _is_pipe(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return sys.platform != "win32" and (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode))


@contextlib.asynccontextmanager
async def _stdio() -> AsyncIterator[Any]:
    """``stdio_server`` over this process's stdin and stdout, read and written
    without threads where they are pipes (what every MCP client gives a server).
    Meanwhile fd 1 points at stderr, as ``stdio_server`` itself arranges, so that
    nothing printed by accident reaches the client as a message."""
    if not (_is_pipe(0) and _is_pipe(1)):
        lines = _StdinLines(sys.stdin.buffer)
        lines.start()
        async with stdio_server(stdin=cast(Any, lines)) as streams:
            try:
                yield streams
            finally:
                lines.close()  # the transport's reader ends before the transport
        return
    sys.stdout.flush()
    wire = os.dup(1)
    os.dup2(2, 1)
    blocking = (os.get_blocking(0), os.get_blocking(wire))
    os.set_blocking(0, False)
    os.set_blocking(wire, False)
    try:
        reader = _PipeLines(0)
        async with stdio_server(stdin=cast(Any, reader), stdout=cast(Any, _PipeWriter(wire))) as io:
            try:
                yield io
            finally:
                reader.close()  # the transport's reader ends before the transport
    finally:
        with contextlib.suppress(OSError):
            os.set_blocking(0, blocking[0])
            os.set_blocking(wire, blocking[1])
        with contextlib.suppress(OSError):
            os.dup2(wire, 1)
            os.close(wire)


@dataclass
class _Ended:
    """How a session ended: who closed first, and the server's exit status."""

    by_server: bool = False
    status: int | None = None


class _Relay:
    """Both directions of one client session, with the judge in the middle."""

    def __init__(self, judge: Judge, http: _Http | None) -> None:
        self.judge = judge
        self.http = http
        self.methods: dict[Any, str] = {}  # the client's requests in flight, by id
        self.tools: dict[Any, str] = {}  # the tool each call in flight names
        # each tool's output schema, from the session's last tools/list
        self.output_schemas: dict[str, Any] = {}

    def extra_keys_allowed(self, tool: str | None) -> bool:
        """Whether the tool's structured content may carry one more key (its output
        schema does not say ``additionalProperties: false``)."""
        schema = self.output_schemas.get(tool or "")
        return not (isinstance(schema, dict) and schema.get("additionalProperties") is False)

    def listed(self, result: Mapping[str, Any]) -> None:
        for tool in result.get("tools") or ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                self.output_schemas[tool["name"]] = tool.get("outputSchema")

    async def to_server(self, client_read: Any, server_write: Any, client_write: Any) -> None:
        async for item in client_read:
            if isinstance(item, Exception):
                _say(f"the client sent a message that is not JSON-RPC, answered with an "
                     f"error: {_first_line(item)}")  # fmt: skip
                error = types.ErrorData(code=types.PARSE_ERROR,
                                        message=f"loopwatch mcp: not a JSON-RPC message: "
                                                f"{_first_line(item)}")  # fmt: skip
                await client_write.send(
                    SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=None, error=error))
                )
                continue
            message = item.message
            if isinstance(message, types.JSONRPCRequest):
                self.methods[message.id] = message.method
                if message.method == _TOOLS_CALL:
                    name = (message.params or {}).get("name")
                    self.tools[message.id] = name if isinstance(name, str) else ""
                    refused = await self.judge.call(message.id, message.params)
                    if refused is not None:
                        self.methods.pop(message.id, None)
                        self.tools.pop(message.id, None)
                        reply = types.JSONRPCResponse(jsonrpc="2.0", id=message.id,
                                                      result=refusal(refused))  # fmt: skip
                        await client_write.send(SessionMessage(reply))
                        continue
            elif isinstance(message, types.JSONRPCNotification) and message.method == _CANCELLED:
                request_id = (message.params or {}).get("requestId")
                if self.judge.is_pending(request_id):
                    await self.judge.cancelled(request_id)
            if self.http is not None:
                item = SessionMessage(message, self.http.metadata(message))
            await server_write.send(item)

    async def to_client(self, server_read: Any, client_write: Any) -> None:
        async for item in server_read:
            if isinstance(item, Exception):
                _say(f"the server sent a message that is not JSON-RPC, dropped: "
                     f"{_first_line(item)}")  # fmt: skip
                continue
            message = item.message
            if isinstance(message, (types.JSONRPCResponse, types.JSONRPCError)):
                method = self.methods.pop(message.id, None)
                tool = self.tools.pop(message.id, None)
                if isinstance(message, types.JSONRPCResponse):
                    if self.http is not None and method is not None:
                        self.http.answered(method, message.result)
                    if method == "tools/list":
                        self.listed(message.result)
                    if method == _TOOLS_CALL:
                        notes = await self.judge.result(message.id, message.result)
                        if notes:
                            allowed = self.extra_keys_allowed(tool)
                            result = with_notes(message.result, notes, allowed)
                            item = SessionMessage(types.JSONRPCResponse(
                                jsonrpc="2.0", id=message.id, result=result))  # fmt: skip
                elif method == _TOOLS_CALL:
                    notes = await self.judge.result(message.id, None, message.error.message)
                    if notes:
                        text = " ".join([message.error.message, *notes])
                        error = message.error.model_copy(update={"message": text})
                        item = SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id,
                                                                 error=error))  # fmt: skip
            await client_write.send(item)

    async def fail_pending(self, client_write: Any, why: str) -> None:
        """Answer the client's requests in flight with an error: the server is gone."""
        for request_id in list(self.methods):
            error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"loopwatch mcp: {why}")
            with contextlib.suppress(Exception):
                await client_write.send(
                    SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))
                )
        self.methods.clear()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()


def _capture_spawns() -> None:
    """Keep the server process ``stdio_client`` spawns, for its exit status.

    The SDK's stdio transport owns the process (spawned in a process group of its
    own, stopped by the spec's shutdown sequence) and does not hand it out; its one
    spawning function is wrapped to also put the process in the current task's box
    (:data:`_SPAWNED`), changing nothing else. Without the function (another SDK
    release), the proxy exits 0 when the client leaves and 1 when the server does.
    """
    original = getattr(sdk_stdio, "_create_platform_compatible_process", None)
    if original is None or getattr(original, "_loopwatch_captures", False):
        return

    async def spawn(*args: Any, **kwargs: Any) -> Any:
        process = await original(*args, **kwargs)
        box = _SPAWNED.get()
        if box is not None:
            box.append(process)
        return process

    spawn._loopwatch_captures = True  # type: ignore[attr-defined]
    sdk_stdio._create_platform_compatible_process = spawn


def _status(process: Any) -> int | None:
    code = getattr(process, "returncode", None)
    if code is None:
        return None
    return 128 - code if code < 0 else int(code)


async def serve(
    judge: Judge,
    upstream: Callable[[], AbstractAsyncContextManager[Any]],
    client: AbstractAsyncContextManager[Any] | None = None,
    http: bool = False,
) -> _Ended:
    """Relay one client session (``client``: the streams of ``stdio_server``, over
    this process's stdin and stdout by default) to the server ``upstream()`` opens.
    Returns when either side ends."""
    ended = _Ended()
    relay = _Relay(judge, _Http() if http else None)
    box: list[Any] = []
    token = _SPAWNED.set(box)
    try:
        try:
            opened = upstream()
            server_read, server_write = await opened.__aenter__()
        except OSError as exc:
            raise ServerDidNotStart(exc) from exc
        try:
            await _relay_session(relay, ended, server_read, server_write, client)
        except BaseException:
            if not await opened.__aexit__(*sys.exc_info()):
                raise
        else:
            await opened.__aexit__(None, None, None)
    finally:
        _SPAWNED.reset(token)
    ended.status = _status(box[0]) if box else None
    return ended


async def _relay_session(
    relay: _Relay,
    ended: _Ended,
    server_read: Any,
    server_write: Any,
    client: AbstractAsyncContextManager[Any] | None,
) -> None:
    if client is None:
        client = _stdio()
    try:
        async with client as (client_read, client_write):
            try:
                async with anyio.create_task_group() as tg:

                    async def from_client() -> None:
                        await relay.to_server(client_read, server_write, client_write)
                        tg.cancel_scope.cancel()  # the client left: stop the server

                    tg.start_soon(from_client)
                    await relay.to_client(server_read, client_write)
                    ended.by_server = True
                    await relay.fail_pending(client_write, "the MCP server closed the connection")
                    tg.cancel_scope.cancel()
            finally:
                # end the client transport's own tasks: its reader (blocked handing
                # over a line nobody will take) and its writer (done once flushed)
                for stream in (client_write, client_read):
                    with contextlib.suppress(Exception):
                        await stream.aclose()
    except Exception as exc:
        if not _closing_noise(exc):
            raise


class ServerDidNotStart(Exception):
    """The server's command could not be started (``__cause__``: the OS error)."""


def _leaves(exc: BaseException) -> list[BaseException]:
    inner = getattr(exc, "exceptions", None)
    if not inner:
        return [exc]
    return [leaf for e in inner for leaf in _leaves(e)]


def _closing_noise(exc: BaseException) -> bool:
    """An error raised only because the session's streams were closed under a task."""
    noise = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream)
    return all(isinstance(leaf, noise) for leaf in _leaves(exc))


def _server_label(command: Sequence[str]) -> str:
    return " ".join(command)[:200]


def _make_judge(run_id: str | None, config_path: str | None, command: Sequence[str]) -> Judge:
    """The session's judge: a guard with the configuration found from the working
    directory (the client starts the proxy in the project), or none at all, said on
    stderr, when that configuration cannot be loaded: every call is let through."""
    from ..config import Config, ConfigError

    run = run_id or f"mcp-{uuid.uuid4().hex[:16]}"
    try:
        config = Config.load(config_path) if config_path else Config.load()
        guard: Guard | None = Guard(config)
    except (ConfigError, OSError, ValueError) as exc:
        _say(f"not watching {_server_label(command) or 'this server'} for loops "
             f"(every call is let through): {exc}")  # fmt: skip
        guard = None
    return Judge(guard, run)


def _http_client(headers: Mapping[str, str]) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers=dict(headers), follow_redirects=True,
                              timeout=httpx2.Timeout(30.0, read=300.0))  # fmt: skip


async def _answers(url: str, headers: Mapping[str, str]) -> str | None:
    """Why the URL does not answer HTTP at all (None: it answers, whatever its status)."""
    try:
        async with _http_client(headers) as client:
            request = client.build_request("GET", url, headers={"accept": "text/event-stream"})
            with anyio.fail_after(10):
                response = await client.send(request, stream=True)
                await response.aclose()
    except TimeoutError:
        return "no answer in 10 s"
    except Exception as exc:
        return _first_line(exc)
    return None


def parse_headers(values: Sequence[str]) -> dict[str, str]:
    """``--header "Name: value"`` options as a mapping; ValueError names a bad one."""
    headers: dict[str, str] = {}
    for value in values:
        name, sep, rest = value.partition(":")
        if not sep or not name.strip():
            raise ValueError(f"--header {value!r} is not 'Name: value'")
        headers[name.strip()] = rest.strip()
    return headers


def main(
    command: Sequence[str],
    url: str | None = None,
    headers: Sequence[str] = (),
    run_id: str | None = None,
    config_path: str | None = None,
) -> int:
    """``loopwatch mcp``: run the session, return the exit status (the server's; 2
    when the server cannot be started or reached)."""
    if bool(command) == bool(url):
        _say("give the server's command after --, or --url (one of the two)")
        return _CANNOT_START
    try:
        header_map = parse_headers(headers)
    except ValueError as exc:
        _say(str(exc))
        return _CANNOT_START
    if command and not command[0]:
        _say("the server's command is empty")
        return _CANNOT_START
    judge = _make_judge(run_id, config_path, command or [url or ""])
    return anyio.run(_main, judge, list(command), url, header_map)


async def _main(judge: Judge, command: list[str], url: str | None, headers: dict[str, str]) -> int:
    if url is not None:
        why = await _answers(url, headers)
        if why is not None:
            _say(f"the MCP server at {url} does not answer: {why}")
            return _CANNOT_START

        def upstream() -> AbstractAsyncContextManager[Any]:
            return _http_upstream(url, headers)
    else:
        _capture_spawns()
        params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))

        def upstream() -> AbstractAsyncContextManager[Any]:
            return stdio_client(params, errlog=sys.stderr)

    try:
        ended = await serve(judge, upstream, http=url is not None)
    except ServerDidNotStart as exc:
        cause = exc.__cause__
        why = getattr(cause, "strerror", None) or str(cause)
        if url is None:
            _say(f"cannot start the MCP server {_server_label(command)!r}: {why}")
        else:
            _say(f"cannot connect to the MCP server at {url}: {why}")
        return _CANNOT_START
    except Exception as exc:  # a transport's task failed (an exception group)
        _say(f"the session with the MCP server ended: {_first_line(_leaves(exc)[0])}")
        return 1
    status = ended.status
    if ended.by_server:
        where = url or _server_label(command)
        said = f" with status {status}" if status is not None else ""
        _say(f"the MCP server {where!r} closed the connection{said}")
        return 1 if status is None else status
    return 0 if status is None else status


@contextlib.asynccontextmanager
async def _http_upstream(url: str, headers: Mapping[str, str]) -> AsyncIterator[Any]:
    async with (
        _http_client(headers) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams
