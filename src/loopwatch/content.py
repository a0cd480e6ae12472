"""Content blocks: a tool result that holds no text (a screenshot) is unknown, not a value.

Agents that act on screens get a picture back from each action: Anthropic's computer
tool answers with an ``image`` block, OpenAI's computer-use model with a
``computer_screenshot``, MCP servers and LangChain tools with ``image`` or
``image_url`` blocks. Trace exports keep such a result as its blocks (often as their
JSON, often without the pixels). Read as text, two of them are "the same result" when
the exporter dropped the data, and every scroll of a page is "the same arguments and
the same result" (the issue that made screenshot agents look stuck on every third
identical scroll). The screen is the result, and the trace does not hold it as text:
such a result is unknown (FORMAT.md ``unknown``), whatever the format it came in.
A result with text besides its pictures keeps its text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from .fingerprints import maybe_json

__all__ = ["MEDIA_TYPES", "media_only"]

# Content block types that carry no text: a screenshot, a recording, a file.
MEDIA_TYPES: Final = frozenset(
    {
        "image", "input_image", "image_url", "computer_screenshot", "image_file",
        "audio", "input_audio", "file", "input_file", "document",
    }
)  # fmt: skip


# The JSON of content blocks opens with the first block's type (as the SDKs write them):
# read before anything is parsed.
_FIRST_BLOCK: Final = re.compile(r'\s*\[?\s*\{\s*"type"\s*:\s*"(\w+)"')


def media_only(value: Any) -> bool:
    """Whether a tool's result is content blocks none of which is text: a list of
    blocks, one block, or their JSON (as OpenTelemetry attributes and exports keep
    them). Other values, and a text that merely starts with ``[``, are not."""
    if isinstance(value, str):
        opening = _FIRST_BLOCK.match(value)
        if opening is None or opening.group(1) not in MEDIA_TYPES:
            return False  # most results: not a media block first, nothing parsed
        value = maybe_json(value)
    if isinstance(value, Mapping):
        return value.get("type") in MEDIA_TYPES
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(p, Mapping) and p.get("type") in MEDIA_TYPES for p in value)
    )
