"""A compact, lossless binary encoding for the JSON-like values of run state.

Why not JSON: a live run's state is mostly fingerprints, 16 hex characters each (18
bytes quoted), and the same fingerprint sits in several places at once (the call
window, the repeat tallies, the recent results). This encoding writes a fingerprint
as its 8 bytes, every string only once (a later use is a back-reference of one or two
bytes) and integers below 128 in one byte. On the ``bench_guard`` workload that takes
a live run's state from about 10 kB of JSON to about 4 kB. zlib over the JSON gives
the same size, but costs 80 us per write at its fastest level.

Values: None, bool, int (any size), float (every IEEE double, NaN and infinities
included), str (lone surrogates included), list, and dict with str keys; anything
else is a :class:`TypeError`. A string that only looks like a fingerprint (16
lowercase hex digits, alone or after one ASCII character) is packed the same way and
unpacks to the same string, so the encoding never changes a value. Packing is
deterministic (dicts in insertion order), so two builds write the same bytes.
"""

from __future__ import annotations

import struct
from typing import Any, Final, final

__all__ = ["pack", "unpack"]

_NONE: Final = 0
_FALSE: Final = 1
_TRUE: Final = 2
_INT: Final = 3  # varint
_NEG: Final = 4  # varint of -value - 1
_FLOAT: Final = 5  # 8 bytes, IEEE double, little-endian
_STR: Final = 6  # varint byte length, then UTF-8 (surrogatepass)
_REF: Final = 7  # varint: index of a string already packed
_HEX: Final = 8  # 16 lowercase hex digits, as 8 bytes
_TAGGED_HEX: Final = 9  # one ASCII character, then 16 hex digits as 8 bytes
_TAGGED_HEX15: Final = 10  # one ASCII character, then 15 hex digits as 8 bytes
_LIST: Final = 11  # varint length, then the items
_DICT: Final = 12  # varint length, then key (a string), value pairs
_UINT32S: Final = 13  # varint length, then that many 4-byte little-endian integers
_SMALL: Final = 0x80  # 0x80 | n: the integer n, 0 <= n < 128

_DOUBLE: Final = struct.Struct("<d")
_UTF8: Final = "utf-8"
_LONE: Final = "surrogatepass"


def pack(value: Any) -> bytes:
    """``value`` in the compact encoding (see the module's docstring)."""
    writer = _Writer()
    writer.value(value)
    return b"".join(writer.parts)


def unpack(data: bytes, start: int = 0) -> Any:
    """The value :func:`pack` wrote at ``data[start:]``, which must end there.

    Damaged bytes raise :class:`ValueError` (or IndexError, UnicodeDecodeError,
    RecursionError); the caller turns them into its own error."""
    reader = _Reader(data, start)
    value = reader.value()
    if reader.pos != len(data):
        raise ValueError(f"{len(data) - reader.pos} bytes after the value")
    return value


def _hex_bytes(digits: str) -> bytes | None:
    """The bytes of lowercase hex digits, else None. ``bytes.fromhex`` also takes
    capitals and spaces: the round trip through ``.hex()`` keeps only the strings
    that come back exactly."""
    try:
        raw = _FROMHEX(digits)
    except ValueError:
        return None
    return raw if raw.hex() == digits else None


_FROMHEX: Final = bytes.fromhex


# A long list of 32-bit integers (a text sketch: 64 word hashes) is packed in one
# call, 4 bytes each; shorter lists (evidence steps) are smaller as varints.
_UINT32S_MIN: Final = 16


def _all_uint32(items: list[Any]) -> bool:
    for item in items:
        if type(item) is not int:
            return False
        n: int = item
        if not 0 <= n < 0x1_0000_0000:
            return False
    return True


# Prebuilt bytes: the writer collects pieces in a list and joins them once, so a
# small integer or a header is a list lookup, not an allocation.
_SMALLS: Final = [bytes((_SMALL | n,)) for n in range(0x80)]
_HEADS: Final = [bytes((tag, n)) for tag in range(_SMALL) for n in range(0x80)]
_NONE_B: Final = bytes((_NONE,))
_TRUE_B: Final = bytes((_TRUE,))
_FALSE_B: Final = bytes((_FALSE,))
_FLOAT_B: Final = bytes((_FLOAT,))
_HEX_B: Final = bytes((_HEX,))


def _head(tag: int, n: int) -> bytes:
    """A tag and a varint."""
    if n < 0x80:
        return _HEADS[(tag << 7) | n]
    if n < 0x4000:
        return bytes((tag, (n & 0x7F) | 0x80, n >> 7))
    out = bytearray((tag,))
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@final
class _Writer:
    __slots__ = ("parts", "strings")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.strings: dict[str, int] = {}  # string -> index, in order of first use

    def text(self, s: str) -> None:
        strings = self.strings
        count = len(strings)
        index = strings.setdefault(s, count)
        if index != count:
            self.parts.append(_head(_REF, index))
            return
        n = len(s)
        if 16 <= n <= 17 and s.isascii() and self.fingerprint(s, n):
            return
        raw = s.encode(_UTF8, _LONE)
        self.parts.append(_head(_STR, len(raw)))
        self.parts.append(raw)

    def fingerprint(self, s: str, n: int) -> bool:
        """Pack an ASCII string of 16 lowercase hex digits, alone or after one
        character (or 15 after one: a key for an unknown value); False if it is not
        one."""
        parts = self.parts
        if n == 16:
            raw = _hex_bytes(s)
            if raw is not None:
                parts.append(_HEX_B)
                parts.append(raw)
                return True
            raw = _hex_bytes("0" + s[1:])
            tag = _TAGGED_HEX15
        else:
            raw = _hex_bytes(s[1:])
            tag = _TAGGED_HEX
        if raw is None:
            return False
        parts.append(_HEADS[(tag << 7) | ord(s[0])])
        parts.append(raw)
        return True

    def value(self, v: Any) -> None:
        parts = self.parts
        kind = type(v)
        if kind is str:
            self.text(v)
        elif kind is int:
            n: int = v
            if 0 <= n < 0x80:
                parts.append(_SMALLS[n])
            elif n >= 0:
                parts.append(_head(_INT, n))
            else:
                parts.append(_head(_NEG, -n - 1))
        elif kind is list:
            items: list[Any] = v
            if len(items) >= _UINT32S_MIN and _all_uint32(items):
                parts.append(_head(_UINT32S, len(items)))
                parts.append(struct.pack(f"<{len(items)}I", *items))
                return
            parts.append(_head(_LIST, len(items)))
            for item in items:
                self.value(item)
        elif v is None:
            parts.append(_NONE_B)
        elif v is True:
            parts.append(_TRUE_B)
        elif v is False:
            parts.append(_FALSE_B)
        elif kind is dict:
            mapping: dict[Any, Any] = v
            parts.append(_head(_DICT, len(mapping)))
            for key, item in mapping.items():
                if type(key) is not str:
                    raise TypeError(f"dict keys must be str, not {type(key).__name__}")
                self.text(key)
                self.value(item)
        elif kind is float:
            parts.append(_FLOAT_B)
            parts.append(_DOUBLE.pack(v))
        elif isinstance(v, (str, int, float)):  # a subclass (an enum member, numpy's float64)
            self.value(str(v) if isinstance(v, str) else int(v) if isinstance(v, int) else float(v))
        else:
            raise TypeError(f"cannot pack a {kind.__name__}")


@final
class _Reader:
    __slots__ = ("data", "pos", "strings")

    def __init__(self, data: bytes, start: int) -> None:
        self.data = data
        self.pos = start
        self.strings: list[str] = []

    def varint(self) -> int:
        data = self.data
        n = 0
        shift = 0
        while True:
            byte = data[self.pos]
            self.pos += 1
            n |= (byte & 0x7F) << shift
            if byte < 0x80:
                return n
            shift += 7

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if end > len(self.data):
            raise ValueError("truncated")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def text(self, tag: int) -> str:
        if tag == _REF:
            return self.strings[self.varint()]
        if tag == _STR:
            s = self.take(self.varint()).decode(_UTF8, _LONE)
        elif tag == _HEX:
            s = self.take(8).hex()
        elif tag == _TAGGED_HEX:
            first = chr(self.byte())
            s = first + self.take(8).hex()
        elif tag == _TAGGED_HEX15:
            first = chr(self.byte())
            digits = self.take(8).hex()
            if digits[0] != "0":
                raise ValueError("a tagged fingerprint out of range")
            s = first + digits[1:]
        else:
            raise ValueError(f"expected a string, found tag {tag}")
        self.strings.append(s)
        return s

    def byte(self) -> int:
        byte = self.data[self.pos]
        self.pos += 1
        return byte

    def value(self) -> Any:
        tag = self.byte()
        if tag >= _SMALL:
            return tag - _SMALL
        if tag == _LIST:
            return [self.value() for _ in range(self.varint())]
        if tag == _DICT:
            mapping: dict[str, Any] = {}
            for _ in range(self.varint()):
                key = self.text(self.byte())
                mapping[key] = self.value()
            return mapping
        if tag == _UINT32S:
            size = self.varint()
            return list(struct.unpack(f"<{size}I", self.take(4 * size)))
        if tag == _NONE:
            return None
        if tag == _TRUE:
            return True
        if tag == _FALSE:
            return False
        if tag == _INT:
            return self.varint()
        if tag == _NEG:
            return -self.varint() - 1
        if tag == _FLOAT:
            value: float = _DOUBLE.unpack(self.take(8))[0]
            return value
        return self.text(tag)
