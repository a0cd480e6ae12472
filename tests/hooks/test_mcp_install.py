"""``loopwatch install | uninstall mcp CLIENT`` and the doctor's MCP section: the servers a
client has configured are put behind ``loopwatch mcp`` in the client's own file, which
keeps its layout (indentation, key order, one-line arrays, JSONC comments), installing
twice changes nothing, uninstall gives the file back byte for byte, and what install
writes really starts the server behind the proxy (the SDK's client lists its tools)."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from loopwatch.cli import main
from loopwatch.hooks import json_edit
from loopwatch.hooks.mcp_install import (
    CLIENTS,
    config_path,
    install,
    launcher,
    servers,
    uninstall,
)

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
BIN = Path(sys.executable).parent


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository as the working directory, a home and a state folder of its own."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    monkeypatch.chdir(root)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("LOOPWATCH_STATE", str(tmp_path / "state" / "state.db"))
    for name in ("XDG_CONFIG_HOME", "CLAUDE_CONFIG_DIR", "APPDATA"):
        monkeypatch.delenv(name, raising=False)
    return root


CLAUDE_CODE = """{
  "mcpServers": {
    "fs": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],
      "env": {"ROOT": "/tmp"}
    },
    "bare": {
      "type": "stdio",
      "command": "my-server"
    },
    "remote": {
      "type": "http",
      "url": "https://example.com/mcp",
      "headers": {
        "Authorization": "Bearer ${TOKEN}"
      }
    },
    "events": {"type": "sse", "url": "https://example.com/sse"}
  },
  "permissions": {"allow": ["Bash"]}
}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode())
    return path


def plain(path: Path) -> Any:
    return json_edit.parse(path.read_bytes().decode()).plain()


def test_claude_code_project_servers_are_wrapped_and_restored_exactly(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(repo / ".mcp.json", CLAUDE_CODE)
    path.chmod(0o600)
    assert main(["install", "mcp", "claude-code"]) == 0
    out = capsys.readouterr().out
    assert "wrapped the stdio server 'fs'" in out and "wrapped the http server 'remote'" in out
    assert "left 'events' as it is: an SSE server" in out
    data = plain(path)
    fs, bare, remote = (data["mcpServers"][n] for n in ("fs", "bare", "remote"))
    assert fs == {"command": "loopwatch", "env": {"ROOT": "/tmp"},
                  "args": ["mcp", "--", "npx", "-y", "@modelcontextprotocol/server-filesystem",
                           "/tmp"]}  # fmt: skip
    assert bare == {"type": "stdio", "command": "loopwatch", "args": ["mcp", "--", "my-server"]}
    assert remote == {"type": "stdio", "command": "loopwatch",
                      "args": ["mcp", "--url", "https://example.com/mcp",
                               "--header", "Authorization: Bearer ${TOKEN}"]}  # fmt: skip
    assert data["mcpServers"]["events"] == {"type": "sse", "url": "https://example.com/sse"}
    assert data["permissions"] == {"allow": ["Bash"]}
    # the layout is kept: the lines around the changes are untouched, in order
    text = path.read_text()
    assert '      "args": ["mcp", "--", "npx", "-y",' in text
    assert '    "events": {"type": "sse", "url": "https://example.com/sse"}\n' in text
    assert list(data["mcpServers"]) == ["fs", "bare", "remote", "events"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # a private file stays private
    wrapped = path.read_bytes()
    assert main(["install", "mcp", "claude-code"]) == 0  # twice: nothing changes
    assert path.read_bytes() == wrapped
    assert main(["uninstall", "mcp", "claude-code"]) == 0
    assert path.read_bytes() == CLAUDE_CODE.encode()
    assert main(["uninstall", "mcp", "claude-code"]) == 0
    assert "nothing to change" in capsys.readouterr().out


VSCODE = """// servers for this workspace
{
    "inputs": [
        {"type": "promptString", "id": "token", "password": true},
    ],
    "servers": {
        /* the files */
        "files": {
            "type": "stdio",
            "command": "node",
            "args": [
                "server.js",  // the entry point
                "--root",
                "."
            ]
        },
        "api": {
            "type": "http",
            "url": "http://127.0.0.1:9000/mcp"
        },
    },
}
"""


def test_vscode_jsonc_keeps_its_comments_and_trailing_commas(repo: Path) -> None:
    path = write(repo / ".vscode" / "mcp.json", VSCODE)
    assert install("vscode", path, "project") == [
        "wrapped the stdio server 'files'",
        "wrapped the http server 'api'",
    ]
    text = path.read_text()
    for kept in ("// servers for this workspace", "/* the files */", "// the entry point",
                 '"password": true},\n    ],'):  # fmt: skip
        assert kept in text
    assert '                "mcp",\n                "--",\n                "node",\n' in text
    data = plain(path)
    assert data["servers"]["files"]["args"] == ["mcp", "--", "node", "server.js", "--root", "."]
    assert data["servers"]["api"]["args"] == ["mcp", "--url", "http://127.0.0.1:9000/mcp"]
    assert uninstall("vscode", path) == ["restored the server 'files'", "restored the server 'api'"]
    assert path.read_text() == VSCODE


def test_gemini_cli_http_and_sse_servers(repo: Path) -> None:
    path = write(repo / ".gemini" / "settings.json", json.dumps({
        "mcpServers": {
            "stream": {"httpUrl": "http://127.0.0.1:9/mcp", "timeout": 5000, "trust": True},
            "events": {"url": "http://127.0.0.1:9/sse"},
        },
        "general": {"vimMode": True},
    }, indent=2) + "\n")  # fmt: skip
    original = path.read_bytes()
    changes = install("gemini-cli", path, "project")
    assert changes[0] == "wrapped the http server 'stream'"
    assert changes[1].startswith("left 'events' as it is: an SSE server")
    stream = plain(path)["mcpServers"]["stream"]
    assert stream == {"command": "loopwatch", "args": ["mcp", "--url", "http://127.0.0.1:9/mcp"],
                      "timeout": 5000, "trust": True}  # fmt: skip
    uninstall("gemini-cli", path)
    assert path.read_bytes() == original


def test_without_the_journal_uninstall_rebuilds_from_the_command_line(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project file committed wrapped, uninstalled on another machine (no journal):
    every server comes back with its command, arguments and headers."""
    path = write(repo / ".mcp.json", CLAUDE_CODE)
    install("claude-code", path, "project")
    monkeypatch.setenv("LOOPWATCH_STATE", str(tmp_path / "elsewhere" / "state.db"))
    assert len(uninstall("claude-code", path)) == 3
    assert plain(path) == json.loads(CLAUDE_CODE)
    # stdio servers with arguments come back byte for byte all the same
    assert '"args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"],' in path.read_text()


def test_a_user_install_runs_this_loopwatch_by_its_path(repo: Path, tmp_path: Path) -> None:
    path = config_path("claude-desktop")  # user scope only
    assert path == tmp_path / "home" / ".config" / "Claude" / "claude_desktop_config.json"
    write(path, json.dumps({"mcpServers": {"x": {"command": "srv", "args": ["a"]}}}))
    install("claude-desktop", path, "user")
    entry = plain(path)["mcpServers"]["x"]
    assert [entry["command"], *entry["args"]] == [*launcher("user"), "mcp", "--", "srv", "a"]
    assert os.path.isabs(entry["command"])
    assert config_path("claude-code", "user") == tmp_path / "home" / ".claude.json"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["install", "mcp", "claude-desktop", "--project"], "has no project settings: use --user"),
        (["install", "mcp", "notepad"], "unknown MCP client 'notepad'; supported: claude-desktop"),
        (["install", "mcp"], "no MCP client named"),
        (["uninstall", "claude-code", "cursor"], "claude-code takes no client"),
    ],
)
def test_usage_errors(
    repo: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1


def test_a_file_that_is_not_json_is_named_with_its_line(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(repo / ".cursor" / "mcp.json", '{"mcpServers": {\n  "a": {"command": }\n}}')
    assert main(["install", "mcp", "cursor"]) == 2
    err = capsys.readouterr().err
    assert "not JSON: line 2 column 20" in err and err.count("\n") == 1
    assert path.read_text().startswith('{"mcpServers"')  # untouched


def test_no_file_is_no_change(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "mcp", "cursor"]) == 0
    assert "no MCP servers configured there" in capsys.readouterr().out
    assert not (repo / ".cursor").exists()


def test_what_install_writes_starts_the_server_behind_the_proxy(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wrapped command line, run as the client runs it (``loopwatch`` from PATH),
    starts the server behind ``loopwatch mcp``: the SDK's client lists its tools."""
    server = [sys.executable, str(HELPERS / "mcp_server.py")]
    configured = {"test": {"command": server[0], "args": server[1:]}}
    path = write(repo / ".mcp.json", json.dumps({"mcpServers": configured}, indent=2))
    install("claude-code", path, "project")
    entry = plain(path)["mcpServers"]["test"]
    environ = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}

    async def tools() -> list[str]:
        params = StdioServerParameters(command=entry["command"], args=entry["args"], env=environ)
        with anyio.fail_after(60):
            async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
                await session.initialize()
                return [t.name for t in (await session.list_tools()).tools]

    assert "lookup" in anyio.run(tools)
    assert entry["args"][:2] == ["mcp", "--"]


def doctor_mcp(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code = main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {(m["client"], m["scope"]): m for m in report["mcp"]}


def test_doctor_lists_wrapped_and_unwatched_servers(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    path = write(repo / ".mcp.json", CLAUDE_CODE)
    code, mcp = doctor_mcp(capsys)
    found = mcp[("claude-code", "project")]
    assert code == 0 and found["wrapped"] == []
    assert found["not_wrapped"] == ["fs", "bare", "remote"] and found["left"] == ["events (sse)"]
    install("claude-code", path, "project")
    code, mcp = doctor_mcp(capsys)
    found = mcp[("claude-code", "project")]
    assert code == 0 and found["ok"]
    assert found["wrapped"] == ["fs", "bare", "remote"] and found["not_wrapped"] == []
    assert main(["doctor"]) == 0
    assert "behind loopwatch: fs, bare, remote (loopwatch mcp)" in capsys.readouterr().out
    # where the client finds no loopwatch, it cannot start the servers at all: broken
    monkeypatch.setenv("PATH", "/nonexistent")
    code, mcp = doctor_mcp(capsys)
    assert code == 2
    assert "loopwatch is not found" in mcp[("claude-code", "project")]["problem"]


# -- properties ------------------------------------------------------------------------
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
                max_size=8)  # fmt: skip
words = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
stdio = st.fixed_dictionaries(
    {"command": words.filter(bool)},
    optional={"args": st.lists(words, max_size=4), "env": st.dictionaries(names, words, max_size=2),
              "type": st.just("stdio")},
)  # fmt: skip
http = st.fixed_dictionaries(
    {"type": st.just("http"), "url": words.map(lambda w: "https://h/" + w)},
    optional={"headers": st.dictionaries(names.filter(lambda n: ":" not in n and n.strip() == n),
                                         words.map(str.strip), max_size=2)},
)  # fmt: skip
configs = st.fixed_dictionaries(
    {"mcpServers": st.dictionaries(names, st.one_of(stdio, http), max_size=4)},
    optional={"theme": words, "projects": st.dictionaries(names, st.integers(), max_size=2)},
)
layouts = st.sampled_from([None, 1, 2, 4, "\t"])


def unwrapped(config: dict[str, Any]) -> dict[str, Any]:
    """What the config means once unwrapped without the journal: `"args": []` and no
    args at all are the same to every client, and so are empty headers and none."""
    out = json.loads(json.dumps(config))
    for entry in out["mcpServers"].values():
        for key in ("args", "headers"):
            if entry.get(key) in ([], {}):
                del entry[key]
    return out


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(config=configs, indent=layouts, crlf=st.booleans())
def test_install_then_uninstall_is_the_identity(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any],
    indent: Any, crlf: bool,
) -> None:  # fmt: skip
    text = json.dumps(config, indent=indent, ensure_ascii=False) + "\n"
    if crlf:
        text = text.replace("\n", "\r\n")
    path = write(repo / ".mcp.json", text)
    monkeypatch.setenv("LOOPWATCH_STATE", str(tmp_path / "state" / "state.db"))
    install("claude-code", path, "project")
    wrapped = path.read_bytes()
    # every server runs behind loopwatch, with its own command line intact after `--`
    data = plain(path)
    for name, entry in config["mcpServers"].items():
        got = data["mcpServers"][name]
        if "url" in entry:
            assert got["args"][:3] == ["mcp", "--url", entry["url"]]
        else:
            assert got["args"] == ["mcp", "--", entry["command"], *entry.get("args", [])]
        assert got["command"] == "loopwatch"
    assert {k: v for k, v in data.items() if k != "mcpServers"} == {
        k: v for k, v in config.items() if k != "mcpServers"
    }
    install("claude-code", path, "project")
    assert path.read_bytes() == wrapped  # idempotent
    uninstall("claude-code", path)
    assert path.read_bytes() == text.encode()  # byte for byte
    # and without the journal, the same meaning
    install("claude-code", path, "project")
    monkeypatch.setenv("LOOPWATCH_STATE", str(tmp_path / "other" / "state.db"))
    uninstall("claude-code", path)
    assert unwrapped(plain(path)) == unwrapped(config)


@given(st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | words,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(words, inner, max_size=3),
    max_leaves=12,
), layouts)  # fmt: skip
def test_the_parser_reads_what_json_reads(value: Any, indent: Any) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    root = json_edit.parse(text)
    assert root.plain() == json.loads(text)
    assert (root.start, root.end) == (0, len(text))


def test_every_client_has_a_project_or_user_file(repo: Path) -> None:
    for client in CLIENTS:
        paths = set()
        for scope in ("project", "user"):
            try:
                paths.add(config_path(client, scope))
            except ValueError:
                assert client == "claude-desktop" and scope == "project"
        assert paths
    assert servers("cursor", repo / "missing.json") == []
