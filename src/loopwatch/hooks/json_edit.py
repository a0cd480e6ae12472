"""Edit a JSON settings file in place: change a few values, keep every other byte.

``json.loads`` then ``json.dumps`` rewrites a whole file in one layout: a user's
indentation, one-line arrays, key spacing and (in the JSONC files VS Code and Gemini
CLI read) comments would be lost, and an install could not be undone byte for byte.
Here a file is parsed into nodes that know where they sit in the text (:func:`parse`),
and a change is a replacement of one span (:func:`apply`), written in the layout the
surrounding members already use (:func:`member_separator`, :func:`item_separator`).

JSONC is read as VS Code and Gemini CLI read it: ``//`` and ``/* */`` comments and
trailing commas are allowed, and kept.
"""

from __future__ import annotations

import json
import json.decoder
import re
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "Edit",
    "Member",
    "Node",
    "apply",
    "item_separator",
    "member_separator",
    "parse",
    "render",
]

_NUMBER: Final = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS: Final = {"true": True, "false": False, "null": None}
_SPACE: Final = " \t\r\n\ufeff"
# the json module's own string decoder (escapes, surrogates, control characters)
_scanstring: Any = getattr(json.decoder, "scanstring")  # noqa: B009  # untyped in typeshed


@dataclass
class Member:
    """``"key": value`` in an object; ``start`` is the key's opening quote."""

    key: str
    start: int
    value: Node

    @property
    def end(self) -> int:
        return self.value.end


@dataclass
class Node:
    """A JSON value and its span ``text[start:end]``."""

    kind: str  # object | array | string | number | literal
    start: int
    end: int
    value: Any = None  # scalars: the decoded value
    members: list[Member] = field(default_factory=list)
    items: list[Node] = field(default_factory=list)

    def member(self, key: str) -> Member | None:
        """The last member named ``key`` (JSON parsers keep the last of duplicates)."""
        found = None
        for member in self.members:
            if member.key == key:
                found = member
        return found

    def plain(self) -> Any:
        """The value as ``json.loads`` would give it."""
        if self.kind == "object":
            return {m.key: m.value.plain() for m in self.members}
        if self.kind == "array":
            return [item.plain() for item in self.items]
        return self.value


@dataclass(frozen=True)
class Edit:
    """Replace ``text[start:end]`` by ``text``."""

    start: int
    end: int
    text: str


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, at: int, why: str) -> ValueError:
        line = self.text.count("\n", 0, at) + 1
        column = at - (self.text.rfind("\n", 0, at) + 1) + 1
        return ValueError(f"line {line} column {column}: {why}")

    def skip(self, i: int) -> int:
        """Past whitespace and comments."""
        text, n = self.text, len(self.text)
        while i < n:
            if text[i] in _SPACE:
                i += 1
            elif text.startswith("//", i):
                end = text.find("\n", i)
                i = n if end < 0 else end + 1
            elif text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise self.fail(i, "a comment that never ends")
                i = end + 2
            else:
                break
        return i

    def value(self, i: int) -> Node:
        i = self.skip(i)
        if i >= len(self.text):
            raise self.fail(i, "a value was expected, the file ends")
        c = self.text[i]
        if c == "{":
            return self.container(i, "object", "}")
        if c == "[":
            return self.container(i, "array", "]")
        if c == '"':
            decoded, end = self.string(i)
            return Node("string", i, end, decoded)
        number = _NUMBER.match(self.text, i)
        if number:
            raw = number.group()
            return Node("number", i, number.end(), json.loads(raw))
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, i):
                return Node("literal", i, i + len(word), literal)
        raise self.fail(i, f"unexpected {c!r}")

    def string(self, i: int) -> tuple[str, int]:
        try:
            decoded, end = _scanstring(self.text, i + 1)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.pos, exc.msg) from None
        return decoded, end

    def container(self, start: int, kind: str, close: str) -> Node:
        node = Node(kind, start, start)
        i = self.skip(start + 1)
        while True:
            if i >= len(self.text):
                raise self.fail(i, f"the file ends before {close!r}")
            if self.text[i] == close:
                node.end = i + 1
                return node
            if kind == "object":
                if self.text[i] != '"':
                    raise self.fail(i, "a key in double quotes was expected")
                key, after = self.string(i)
                colon = self.skip(after)
                if colon >= len(self.text) or self.text[colon] != ":":
                    raise self.fail(colon, "':' was expected after a key")
                value = self.value(colon + 1)
                node.members.append(Member(key, i, value))
            else:
                value = self.value(i)
                node.items.append(value)
            i = self.skip(value.end)
            if i < len(self.text) and self.text[i] == ",":
                i = self.skip(i + 1)  # a trailing comma before the close is allowed (JSONC)
            elif i >= len(self.text) or self.text[i] != close:
                raise self.fail(i, f"',' or {close!r} was expected")


def parse(text: str) -> Node:
    """The document's root value; ValueError ``line L column C: why`` when it is not
    JSON (comments and trailing commas allowed)."""
    parser = _Parser(text)
    root = parser.value(0)
    rest = parser.skip(root.end)
    if rest < len(text):
        raise parser.fail(rest, "more text after the JSON value")
    return root


def apply(text: str, edits: list[Edit]) -> str:
    """``text`` with the edits made (their spans must not overlap)."""
    out = text
    for edit in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        out = out[: edit.start] + edit.text + out[edit.end :]
    return out


def render(value: Any) -> str:
    """A value as one line of JSON, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False)


def _space_before(text: str, at: int) -> str:
    start = at
    while start > 0 and text[start - 1] in " \t\r\n":
        start -= 1
    return text[start:at]


def _separator(text: str, starts: list[int]) -> str:
    """What separates a container's entries: the whitespace before the second entry,
    after a comma (else before the first: a one-entry container)."""
    if len(starts) >= 2:
        return "," + _space_before(text, starts[1])
    if starts:
        space = _space_before(text, starts[0])
        return "," + space if "\n" in space else ", "
    return ", "


def member_separator(text: str, node: Node) -> str:
    """``,`` and the whitespace that lead to the next member of ``node`` in its layout."""
    return _separator(text, [m.start for m in node.members])


def item_separator(text: str, node: Node) -> str:
    """``,`` and the whitespace between the items of array ``node`` in its layout."""
    return _separator(text, [item.start for item in node.items])
