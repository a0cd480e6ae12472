"""``loopwatch install | uninstall mcp CLIENT [--project | --user]``.

Puts the MCP servers a client already has behind ``loopwatch mcp`` (and takes them
out again), in the client's own settings file:

* Claude Desktop: ``claude_desktop_config.json`` (user only);
* Claude Code: ``.mcp.json`` (project) or ``~/.claude.json`` (user; in
  ``$CLAUDE_CONFIG_DIR`` when set);
* Cursor: ``.cursor/mcp.json`` or ``~/.cursor/mcp.json``;
* VS Code: ``.vscode/mcp.json`` (its servers under ``servers``) or the user
  profile's ``mcp.json``;
* Gemini CLI: ``.gemini/settings.json`` or ``~/.gemini/settings.json``.

A stdio server's command becomes ``loopwatch mcp -- <command> <args>``; a
streamable-HTTP server becomes a stdio server running ``loopwatch mcp --url <url>``
(its headers as ``--header``). SSE servers and other transports are left as they are
(and said so). A project install writes ``loopwatch`` (found on PATH, as each
teammate's own); a user install the loopwatch of this interpreter, by its path (a
desktop app's PATH rarely has a virtualenv's folder).

The file keeps its layout: only the spans that change are rewritten, in the style of
the members around them (:mod:`.json_edit`; comments in JSONC files stay). Installing
twice changes nothing. Uninstall restores each server exactly as it was: what an
install replaced is kept in ``mcp-installs.json`` beside loopwatch's state, and put
back byte for byte when the server was not edited since; otherwise (or on another
machine, for a committed project file) the original is rebuilt from the wrapped
command line, which holds all of it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from . import json_edit
from .install import _write, project_root
from .json_edit import Edit, Member, Node

__all__ = [
    "CLIENTS",
    "Server",
    "config_path",
    "default_scope",
    "install",
    "launcher",
    "servers",
    "uninstall",
]


@dataclass(frozen=True)
class _Client:
    """Where a client keeps its MCP servers."""

    key: str  # the object of servers, by name
    project: str | None  # path under the project root; None: no project settings
    http_key: str = "url"  # where a streamable-HTTP server's URL is
    sse_key: str = ""  # a key that means SSE by itself (Gemini CLI's "url")


CLIENTS: Final[dict[str, _Client]] = {
    "claude-desktop": _Client("mcpServers", None),
    "claude-code": _Client("mcpServers", ".mcp.json"),
    "cursor": _Client("mcpServers", ".cursor/mcp.json"),
    "vscode": _Client("servers", ".vscode/mcp.json"),
    "gemini-cli": _Client("mcpServers", ".gemini/settings.json", "httpUrl", "url"),
}
_HTTP_TYPES: Final = ("http", "streamable-http", "streamableHttp")
_JOURNAL: Final = "mcp-installs.json"


def _check(client: str) -> _Client:
    found = CLIENTS.get(client)
    if found is None:
        raise ValueError(f"unknown MCP client {client!r}; supported: {', '.join(CLIENTS)}")
    return found


def default_scope(client: str) -> str:
    """``project`` where the client has project settings, else ``user``."""
    return "project" if _check(client).project else "user"


def _app_config_dir() -> Path:
    """Where desktop apps keep their settings on this platform."""
    home = Path(os.path.expanduser("~"))
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming")
    return Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")


def config_path(client: str, scope: str | None = None, root: Path | None = None) -> Path:
    """The settings file ``install mcp`` edits for this client and scope."""
    target = _check(client)
    scope = scope or default_scope(client)
    if scope == "project":
        if target.project is None:
            raise ValueError(f"{client} has no project settings: use --user")
        return (root or project_root()) / target.project
    home = Path(os.path.expanduser("~"))
    if client == "claude-desktop":
        return _app_config_dir() / "Claude" / "claude_desktop_config.json"
    if client == "claude-code":
        folder = os.environ.get("CLAUDE_CONFIG_DIR")
        return Path(folder) / ".claude.json" if folder else home / ".claude.json"
    if client == "vscode":
        return _app_config_dir() / "Code" / "User" / "mcp.json"
    return home / (target.project or "")


def launcher(scope: str) -> list[str]:
    """The command line that runs ``loopwatch`` for a server (``mcp`` follows it)."""
    if scope == "project":
        return ["loopwatch"]
    folder = Path(sys.executable).parent
    for name in ("loopwatch", "loopwatch.exe"):
        if (folder / name).is_file():
            return [str(folder / name)]
    return [sys.executable, "-m", "_loopwatch_entry"]


# -- reading a server entry ------------------------------------------------------------
@dataclass(frozen=True)
class Server:
    """One configured server as ``install mcp`` sees it."""

    name: str
    transport: str  # stdio | http | sse | other
    wrapped: bool  # runs behind loopwatch mcp
    command: list[str]  # what the client runs: the launcher when wrapped


def _strings(node: Node | None) -> list[str] | None:
    if node is None or node.kind != "array" or any(i.kind != "string" for i in node.items):
        return None
    return [str(i.value) for i in node.items]


def _wrapped_at(command: str, args: list[str]) -> int | None:
    """Where ``mcp`` is in a wrapped server's arguments (None: not loopwatch's)."""
    base = os.path.basename(command.replace("\\", "/")).lower()
    if base in ("loopwatch", "loopwatch.exe") and args[:1] == ["mcp"]:
        return 0
    if args[:3] == ["-m", "_loopwatch_entry", "mcp"]:
        return 2
    return None


def _transport(client: _Client, entry: Node) -> str:
    def text(key: str) -> str | None:
        member = entry.member(key)
        return member.value.value if member and member.value.kind == "string" else None

    kind = text("type")
    if client.sse_key and text(client.sse_key) is not None and kind not in _HTTP_TYPES:
        return "sse"
    url = text(client.http_key) or (text("url") if kind in _HTTP_TYPES else None)
    if url is not None and kind in (None, *_HTTP_TYPES):
        return "http"
    if kind == "sse":
        return "sse"
    if text("command") is not None and kind in (None, "stdio"):
        return "stdio"
    return "other"


def _describe(client: _Client, name: str, entry: Node) -> Server:
    transport = _transport(client, entry)
    command_member = entry.member("command")
    args_member = entry.member("args")
    command = [str(command_member.value.value)] if command_member else []
    args = _strings(args_member.value) if args_member else []
    if transport == "stdio" and args is not None:
        at = _wrapped_at(command[0], args)
        if at is not None:
            return Server(name, "stdio", True, command + args[: at + 1])
        return Server(name, "stdio", False, command + args)
    return Server(name, transport, False, command)


def _server_nodes(client: _Client, root: Node) -> list[Member]:
    table = root.member(client.key) if root.kind == "object" else None
    if table is None or table.value.kind != "object":
        return []
    return [m for m in table.value.members if m.value.kind == "object"]


def _read(path: Path) -> tuple[str, Node] | None:
    if not path.exists():
        return None
    text = path.read_bytes().decode("utf-8")  # line ends as they are: no translation
    if not text.strip():
        return None
    try:
        root = json_edit.parse(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if root.kind != "object":
        raise ValueError("does not hold a JSON object")
    return text, root


def servers(client: str, path: Path) -> list[Server]:
    """The servers configured in ``path``, wrapped or not (``loopwatch doctor``)."""
    target = _check(client)
    read = _read(path)
    if read is None:
        return []
    _, root = read
    return [_describe(target, m.key, m.value) for m in _server_nodes(target, root)]


# -- wrapping --------------------------------------------------------------------------
def _wrap_stdio(text: str, entry: Node, prefix: list[str]) -> list[Edit]:
    """``command`` becomes the launcher; the original command leads the arguments."""
    command = entry.member("command")
    assert command is not None
    args = entry.member("args")
    head, rest = prefix[0], [*prefix[1:], str(command.value.value)]
    edits = [Edit(command.value.start, command.value.end, json_edit.render(head))]
    if args is None:
        line = json_edit.member_separator(text, entry) + '"args": ' + json_edit.render(rest)
        edits.append(Edit(command.end, command.end, line))
    elif args.value.items:
        sep = json_edit.item_separator(text, args.value)
        inserted = "".join(json_edit.render(a) + sep for a in rest)
        edits.append(Edit(args.value.items[0].start, args.value.items[0].start, inserted))
    else:
        edits.append(Edit(args.value.start, args.value.end, json_edit.render(rest)))
    return edits


def _remove_member(text: str, entry: Node, member: Member) -> Edit:
    """Take a member out with the comma that joins it to its neighbour."""
    index = entry.members.index(member)
    if index > 0:
        return Edit(entry.members[index - 1].end, member.end, "")
    if len(entry.members) > 1:
        return Edit(member.start, entry.members[1].start, "")
    return Edit(member.start, member.end, "")


def _wrap_http(client: _Client, text: str, entry: Node, prefix: list[str]) -> list[Edit] | None:
    """The URL member becomes ``command`` and ``args`` (``--url``, ``--header``); a
    ``type`` says stdio; ``headers`` moves into the arguments."""
    kind = entry.member("type")
    url = entry.member(client.http_key) or entry.member("url")
    headers = entry.member("headers")
    if url is None or url.value.kind != "string":
        return None
    args = [*prefix[1:], "--url", str(url.value.value)]
    if headers is not None:
        if headers.value.kind != "object" or any(
            m.value.kind != "string" for m in headers.value.members
        ):
            return None
        for m in headers.value.members:
            args += ["--header", f"{m.key}: {m.value.value}"]
    sep = json_edit.member_separator(text, entry)
    new = f'"command": {json_edit.render(prefix[0])}{sep}"args": {json_edit.render(args)}'
    edits = [Edit(url.start, url.end, new)]
    if kind is not None:
        edits.append(Edit(kind.value.start, kind.value.end, '"stdio"'))
    if headers is not None:
        edits.append(_remove_member(text, entry, headers))
    return edits


def install(client: str, path: Path, scope: str | None = None) -> list[str]:
    """Wrap every server of ``path`` not wrapped yet; the changes (empty: none)."""
    target = _check(client)
    scope = scope or _scope_of(client, path)
    read = _read(path)
    if read is None:
        return []
    text, root = read
    prefix = [*launcher(scope), "mcp"]
    edits: list[Edit] = []
    changes: list[str] = []
    wrapped: list[tuple[str, Node]] = []
    for member in _server_nodes(target, root):
        server = _describe(target, member.key, member.value)
        if server.wrapped:
            continue
        entry_edits: list[Edit] | None = None
        if server.transport == "stdio":
            prefix_stdio = [*prefix, "--"]
            entry_edits = _wrap_stdio(text, member.value, prefix_stdio)
        elif server.transport == "http":
            entry_edits = _wrap_http(target, text, member.value, prefix)
        if entry_edits is None:
            changes.append(f"left {member.key!r} as it is: {_why_not(server.transport)}")
            continue
        edits += entry_edits
        wrapped.append((member.key, member.value))
        changes.append(f"wrapped the {server.transport} server {member.key!r}")
    if not wrapped:
        return [c for c in changes if c.startswith("left")]
    new_text = json_edit.apply(text, edits)
    _remember(target, path, text, new_text, wrapped)
    _write(path, new_text)
    return changes


def _why_not(transport: str) -> str:
    if transport == "sse":
        return "an SSE server (loopwatch mcp reaches stdio and streamable-HTTP servers)"
    if transport == "http":
        return "its headers are not all strings"
    return "not a stdio or streamable-HTTP server"


def _scope_of(client: str, path: Path) -> str:
    try:
        return "user" if path == config_path(client, "user") else "project"
    except ValueError:
        return "project"


# -- the journal of what an install replaced ---------------------------------------------
def _journal_path() -> Path:
    from ._log import state_dir

    return state_dir() / _JOURNAL


def _journal() -> dict[str, Any]:
    try:
        data = json.loads(_journal_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save_journal(data: dict[str, Any]) -> None:
    """Private (0600 in a 0700 folder): a server's entry may hold a token."""
    from ..stores.sqlite import open_private, private_folder

    path = _journal_path()
    private_folder(path.parent)
    tmp = path.with_name(path.name + ".tmp")
    with open(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, ensure_ascii=False)
    os.replace(tmp, path)


def _remember(
    client: _Client, path: Path, old: str, new: str, wrapped: list[tuple[str, Node]]
) -> None:
    """Keep each wrapped entry's text before and after, for an exact uninstall.

    Best effort: without the journal, uninstall rebuilds the entry from its command.
    """
    try:
        new_root = json_edit.parse(new)
        journal = _journal()
        entries = journal.setdefault(str(path.resolve()), {})
        target_entries = {m.key: m.value for m in _server_nodes(client, new_root)}
        for name, entry in wrapped:
            after = target_entries.get(name)
            if after is not None:
                entries[name] = {"original": old[entry.start : entry.end],
                                 "wrapped": new[after.start : after.end]}  # fmt: skip
        _save_journal(journal)
    except Exception:
        pass


# -- unwrapping --------------------------------------------------------------------------
def _unwrap(client: _Client, text: str, entry: Node) -> list[Edit] | None:
    """The edits that rebuild a wrapped entry from its command line."""
    command = entry.member("command")
    args = entry.member("args")
    if command is None or args is None:
        return None
    values = _strings(args.value)
    if values is None:
        return None
    at = _wrapped_at(str(command.value.value), values)
    if at is None or len(values) < at + 3:
        return None
    mode, target = values[at + 1], values[at + 2]
    items = args.value.items
    if mode == "--":
        edits = [Edit(command.value.start, command.value.end, json_edit.render(target))]
        if len(items) > at + 3:
            edits.append(Edit(items[0].start, items[at + 3].start, ""))
        else:
            edits.append(_remove_member(text, entry, args))
        return edits
    if mode != "--url":
        return None
    rest = values[at + 3 :]
    headers = {}
    for flag, value in zip(rest[::2], rest[1::2], strict=False):
        if flag == "--header":
            name, _, header = value.partition(":")
            headers[name.strip()] = header.strip()
    key = client.http_key
    sep = json_edit.member_separator(text, entry)
    new = f"{json_edit.render(key)}: {json_edit.render(target)}"
    if headers:
        new += f'{sep}"headers": {json_edit.render(headers)}'
    if not _adjacent(entry, command, args):
        return None
    edits = [Edit(command.start, args.end, new)]
    kind = entry.member("type")
    if kind is not None and kind.value.value == "stdio":
        edits.append(Edit(kind.value.start, kind.value.end, '"http"'))
    return edits


def _adjacent(entry: Node, first: Member, second: Member) -> bool:
    index = entry.members.index(first)
    return index + 1 < len(entry.members) and entry.members[index + 1] is second


def uninstall(client: str, path: Path) -> list[str]:
    """Put every wrapped server of ``path`` back as it was; the changes."""
    target = _check(client)
    read = _read(path)
    if read is None:
        return []
    text, root = read
    journal = _journal()
    kept = journal.get(str(path.resolve()), {})
    edits: list[Edit] = []
    changes: list[str] = []
    for member in _server_nodes(target, root):
        if not _describe(target, member.key, member.value).wrapped:
            continue
        current = text[member.value.start : member.value.end]
        record = kept.get(member.key)
        if isinstance(record, dict) and record.get("wrapped") == current:
            edits.append(Edit(member.value.start, member.value.end, str(record["original"])))
        else:
            rebuilt = _unwrap(target, text, member.value)
            if rebuilt is None:
                changes.append(f"left {member.key!r}: its loopwatch command was edited by hand")
                continue
            edits += rebuilt
        kept.pop(member.key, None)
        changes.append(f"restored the server {member.key!r}")
    if not edits:
        return changes
    _write(path, json_edit.apply(text, edits))
    if kept or str(path.resolve()) in journal:
        if kept:
            journal[str(path.resolve())] = kept
        else:
            journal.pop(str(path.resolve()), None)
        with contextlib.suppress(OSError):
            _save_journal(journal)
    return changes


def runs(command: list[str]) -> bool:
    """Whether a wrapped server's launcher can be found (its first word)."""
    if not command:
        return False
    first = command[0]
    if os.path.dirname(first):
        return os.path.isfile(first) and os.access(first, os.X_OK)
    return shutil.which(first) is not None
