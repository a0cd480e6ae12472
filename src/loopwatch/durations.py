"""Durations in the configuration: a number of seconds, or a string such as ``"90s"``.

One parser for every duration a user writes (``ttl_seconds`` at the top level and in
a store URL's query, ``[time_budget] max_seconds``), so that ``"1h"`` means one hour
wherever a duration is read, and a value that is not one is refused the same way
everywhere rather than guessed at.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["parse_duration"]

_PART: Final = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)")
_UNIT_SECONDS: Final = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_ACCEPTED: Final = "a positive number of seconds or a duration such as '90s', '30m', '1h', '1h30m'"


def parse_duration(value: object) -> float:
    """Seconds from a positive number, a string of one (``"600"``, as in a URL's query)
    or a string of numbers with units ``s``, ``m``, ``h``, ``d`` (``"1h30m"``).

    Raises :class:`ValueError` for anything else, for zero or less (a run that
    expires at once is never guarded) and for infinity; the caller names the key.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().lower()
        seconds, pos = 0.0, 0
        for match in _PART.finditer(text):
            if text[pos : match.start()].strip():
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos == 0 or text[pos:].strip():
            raise ValueError(f"must be {_ACCEPTED}, not {value!r}")
    else:
        raise ValueError(f"must be {_ACCEPTED}, not {value!r}")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(
            f"must be more than 0 seconds, not {value!r} (a run that expires at once is "
            "never guarded)"
        )
    return seconds
