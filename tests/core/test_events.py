"""Fingerprints: what counts as the same call, the same result, the same output."""

from __future__ import annotations

import json
import math
import os
import re
import string
import subprocess
import sys
from typing import Any

from hypothesis import assume, example, given
from hypothesis import strategies as st

from loopwatch import Event
from loopwatch.fingerprints import mask_volatile, normalise_text, sketch_similarity


def call(name: str, args: object) -> Event:
    return Event.from_dict({"kind": "tool_call", "name": name, "args": args})


def result(text: str, error: bool = False) -> Event:
    return Event.from_dict({"kind": "tool_result", "name": "t", "text": text, "error": error})


def test_call_key_ignores_key_order_and_json_string_encoding() -> None:
    a = call("search", {"q": "paris", "n": 3})
    b = call("search", {"n": 3, "q": "paris"})
    c = call("search", '{"q": "paris", "n": 3}')
    assert a.call_key == b.call_key == c.call_key


def test_call_key_separates_tools_and_arguments() -> None:
    base = call("search", {"q": "paris"})
    assert base.call_key != call("fetch", {"q": "paris"}).call_key
    assert base.call_key != call("search", {"q": "lyon"}).call_key
    # Exact key is exact: case matters there, not in the normalised key.
    upper = call("search", {"q": "PARIS"})
    assert base.call_key != upper.call_key
    assert base.norm_key == upper.norm_key


def test_norm_key_folds_rewording_but_keeps_numbers() -> None:
    variants = [
        "paris weather",
        "Paris weather",
        "paris  weather",
        "weather paris",
        "Paris Weather ",
        "PARIS WEATHER",
        "weather in paris",
        "paris, weather!",
    ]
    keys = {call("web_search", {"q": v}).norm_key for v in variants}
    assert len(keys) == 1
    pages = {call("list_orders", {"page": p, "per_page": 50}).norm_key for p in range(1, 6)}
    assert len(pages) == 5, "pagination must stay distinct"
    assert call("s", {"q": "paris weather"}).norm_key != call("s", {"q": "lyon weather"}).norm_key
    # a calendar day asked about is a question, like a page: scanning days for a free
    # flight is not the same search again (a clock reading is masked: see below)
    dates = [f"2024-05-0{d}" for d in (1, 2, 3)]
    days = {call("search_flights", {"from": "SFO", "date": x}).norm_key for x in dates}
    assert len(days) == 3, "each day asked about must stay distinct"
    asked = {call("web_search", {"q": f"flights SFO JFK on {x}"}).norm_key for x in dates}
    assert len(asked) == 3, "a day inside a query is asked about too"
    reworded = call("web_search", {"q": "2024-05-01: Flights SFO to JFK"}).norm_key
    assert reworded == call("web_search", {"q": "flights SFO JFK 2024-05-01"}).norm_key
    # a clock reading is no question: two calls a few seconds apart are the same call
    at = [call("logs", {"q": f"errors since 2024-05-01 10:00:0{s}"}).norm_key for s in (1, 7)]
    assert at[0] == at[1]


def test_norm_key_masks_volatile_values_and_volatile_named_keys() -> None:
    a = call("get", {"id": "job", "request_id": "r-1", "at": "2024-05-01T10:00:00Z"})
    b = call("get", {"id": "job", "request_id": "r-2", "at": "2024-05-01T10:00:07Z"})
    assert a.norm_key == b.norm_key
    assert a.call_key != b.call_key


def test_result_key_masks_volatile_values_and_marks_errors() -> None:
    a = result("done at 2024-05-01 10:00:00, request 3f2a9c1e-1111-4a5b-9c3d-0123456789ab")
    b = result("done at 2024-05-01 10:00:09, request 7c2a9c1e-2222-4a5b-9c3d-0123456789ab")
    assert a.result_key == b.result_key
    assert result("18C cloudy").result_key != result("19C cloudy").result_key
    assert result("boom").result_key != result("boom", error=True).result_key
    assert result("a  b\n c").result_key == result("a b c").result_key


def test_mask_and_normalise_helpers() -> None:
    assert mask_volatile("trace 0123456789abcdef0123 ok") == "trace # ok"
    assert normalise_text("The Weather, in PARIS!") == "paris weather"


def test_from_dict_is_tolerant_and_keeps_unknown_fields() -> None:
    ev = Event.from_dict({"kind": 3, "text": {"a": 1}, "tokens": "x", "custom": [1]})
    assert ev.kind == ""  # unknown kind: ignored by detectors, keeps its index
    assert json.loads(ev.text) == {"a": 1}
    assert ev.tokens == 0.0
    assert ev.extra == {"custom": [1]}


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(name=st.text(max_size=10), args=_json)
def test_fingerprints_are_deterministic_and_round_trip(name: str, args: object) -> None:
    ev = call(name, args)
    again = Event.from_dict(ev.to_dict())
    assert again.call_key == ev.call_key
    assert again.norm_key == ev.norm_key
    assert len(ev.call_key) == 16


def test_fingerprints_are_stable_across_processes() -> None:
    """State lives in Redis and is shared by workers: keys must not depend on the
    process (no built-in hash() of str, which is salted per process)."""
    code = (
        "from loopwatch import Event;"
        "e=Event.from_dict({'kind':'tool_call','name':'s','args':{'q':'Paris weather'}});"
        "r=Event.from_dict({'kind':'tool_result','text':'18C'});"
        "print(e.call_key, e.norm_key, r.result_key)"
    )
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        outs.add(proc.stdout)
    assert len(outs) == 1
    e = call("s", {"q": "Paris weather"})
    assert outs.pop().split()[0] == e.call_key


def test_lone_surrogates_from_python_callers_do_not_crash() -> None:
    from loopwatch import Config, scan

    bad = "broken \ud800 text " * 3
    events = [
        {"kind": "model", "text": bad},
        {"kind": "tool_call", "name": "t\udfff", "args": {"q": bad}},
        {"kind": "tool_result", "name": "t", "text": bad * 10},
        {"kind": "span", "id": "s", "name": "a", "text": bad},
    ]
    report = scan({"run_id": "r", "events": events * 6}, Config())
    assert report.events == 24 and report.verdict in ("warn", "stop")


@given(st.lists(st.sampled_from(["ok", "2024-05-01T10:00:00Z", "10:00:07", "req_abc12345",
                                 "3f2a9c1e-1111-4a5b-9c3d-0123456789ab", "deadbeefcafe12345678",
                                 "page", "42", "\\n", "  "]), max_size=12))  # fmt: skip
def test_token_masking_equals_masking_the_whole_text(parts: list[str]) -> None:
    from loopwatch.fingerprints import fold_and_mask

    text = " ".join(parts)
    assert fold_and_mask(text) == " ".join(mask_volatile(text).split())


def test_a_huge_result_is_keyed_at_its_ends_and_exactly_in_its_middle() -> None:
    middle = "lorem ipsum dolor " * 100_000
    a = Event("tool_result", "t", text="run at 2024-01-02T03:04:05Z\n" + middle + "\nend")
    b = Event("tool_result", "t", text="run at 2025-06-07T08:09:10Z\n" + middle + "\nend")
    c = Event("tool_result", "t", text="run at 2024-01-02T03:04:05Z\n" + middle + "x\nend")
    assert a.result_key == b.result_key  # a volatile value at an end is masked
    assert a.result_key != c.result_key  # any change in the middle is a change
    upper, lower = Event("user", text="A b" + middle), Event("user", text="a B" + middle)
    assert upper.text_key == lower.text_key


# The volatile-value pattern as it was first written, case-insensitive: the spec the
# faster pattern in events.py (no re.IGNORECASE) must match exactly.
_VOLATILE_SPEC = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
    r"|\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{16,}\b"
    r"|\b(?=[a-z]{2,12}[_-])(?:(?:req|request|trace|span|msg|call|run|toolu|chatcmpl)[_-]"
    r"[a-z0-9]{6,}\b|(?:[a-z]{2,12}[_-]){1,3}(?=[a-z0-9]*\d)(?=[a-z0-9]*[a-z])[a-z0-9]{8,}\b)"
    r'|"(?:(?:id|call_id|tool_call_id|tool_use_id)":"[\w.:-]{3,64}'
    r'|(?-i:(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[a-z])(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{9,40}))(?=")',
    re.IGNORECASE,
)
_PIECES = st.sampled_from(
    [
        *("req", "REQUEST", "ſpan", "Msg", "call", "run", "toolu", "chatcmpl", "id", "İd"),
        *("ID", "call_id", "tool_use_id", "2024-01-02", "10:00:00", "T", "t", "Z", "z"),
        *(".5", "+01", "deadbeef", "DEADBEEF", "0123456789", "ı", "K", "é", "٣", "_", "-"),
        *(":", '"', " ", "\n"),
    ]
)
_CHARS = st.text(alphabet='0123456789abcdefABCDEFxyzKkSsIiTZ_-:."+ {}/İıſKé', max_size=12)


@given(st.lists(_PIECES | _CHARS, max_size=14).map("".join))
def test_the_fast_volatile_pattern_masks_what_the_case_insensitive_one_does(text: str) -> None:
    assert mask_volatile(text) == _VOLATILE_SPEC.sub("#", text)


_NO_DIGIT_IDS = st.tuples(
    st.sampled_from(
        ["req", "REQUEST", "\u017fpan", "Msg", "call", "run", "toolu", "x", "deadbeef"]
    ),
    st.sampled_from(["_", "-", ""]),
    st.text(alphabet="abcdefXYZ-_\u017f\u212a", min_size=4, max_size=30),
).map("".join)


@given(st.lists(_PIECES | _CHARS | _NO_DIGIT_IDS, max_size=14).map("".join))
@example("req_abcdefgh deadbeef-dead-beef-dead-beefdeadbeef \u017fpan-abcdefg REQUEST-abcdef")
@example('10:00:07 2024-01-02 deadbeefcafe12345678 {"id":"abcdef"} "D681PevKs" x_ab12cd34ef')
@example("logs/2024-01-02/req_abcdefgh.txt a/deadbeefcafe12345678/b src/m3_test.py/")
def test_a_token_the_prefilter_skips_has_nothing_to_mask(text: str) -> None:
    from loopwatch.fingerprints import _masked

    for tok in text.split():
        assert _masked([tok]) == [mask_volatile(tok)]  # skipped or not, the same tokens


_ASCII_IDS = st.tuples(
    st.sampled_from(["req", "REQUEST", "sPan", "Msg", "xcall", "run", "toolu", "tracE", "x", ""]),
    st.sampled_from(["_", "-", ""]),
    st.text(alphabet='abcdefXYZ09-_:"./', min_size=0, max_size=40),
).map("".join)
_ASCII_CHARS = st.text(alphabet='0123456789abcdefqtenglu_-:."+{}/ ', max_size=16)


@given(st.lists(_ASCII_IDS | _ASCII_CHARS | _PIECES.filter(str.isascii), max_size=14).map("".join))
@example('{"id":"abcdefgh"} 2024-01-02 deadbeef-dead-beef-dead-beefdeadbeef')  # one per rule
@example('"abc":"x" "a:b"cdefgh "ab":"cdef')
@example("req_abcdefgh CHATCMPL-abcdefgh logs/span-abcdefgh/x xcall_abcdefgh")
@example("a_test_util.py --long-flag-name trace-abcdefg 01234567 0123456789abcdef")
def test_the_character_classes_try_the_tokens_the_string_tests_try(text: str) -> None:
    """The compiled build tests an ASCII token by the classes of its characters
    (_may_hold_by_class), the pure build by string tests (_may_hold_volatile): the
    same tokens are tried, and the tokens left alone have nothing to mask."""
    from loopwatch.fingerprints import _mask_token, _may_hold_by_class, _may_hold_volatile

    for tok in text.split() + text.split("/"):
        tried = _may_hold_by_class(tok)
        assert tried == _may_hold_volatile(tok), tok
        assert (_mask_token(tok) if tried else tok) == mask_volatile(tok)


@given(
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=60)
    | st.lists(_PIECES | _CHARS | st.sampled_from(["The", "in", "PARIS", "a_b", "İs"])).map(
        " ".join
    )
    | st.text(max_size=30)
)
def test_normalised_text_is_the_sorted_regex_words_without_stop_words(text: str) -> None:
    from loopwatch.fingerprints import _STOPWORDS, fold_and_mask

    folded = fold_and_mask(text) if len(text) >= 8 else text
    words = sorted(w for w in re.findall(r"[^\W_]+", folded.lower()) if w not in _STOPWORDS)
    assert normalise_text(text) == " ".join(words)


def test_the_fast_volatile_pattern_on_real_ids() -> None:
    samples = [
        "id 9f1c2b7e-4a3d-4e5f-8a9b-0c1d2e3f4a5b at 2024-05-01T10:20:30.123Z took",
        'tool_use_id "toolu_01ABCdef234" {"call_id":"call_x9Y8z7"} msg_bdrk_01abc12345',
        "REQ-AB12CD34 chatcmpl-9xYz8wVu7 sha 0123456789abcdef0123 and ſpan_abc123def",
        '"D681PevKs" 23:59:59 2024-01-02 +01:00 fc_abc123def456 run-7f3a9c2e1b',
        "lower case: 2024-05-01t10:20:30z 2024-05-01 10:20+0100 ID-abc123def 9F1C2B7E0A",
        "folding letters: \u212aEY_abc12345d ıd_x1y2z3w4 İTEM-ab12cd34ef ſ\u212a-ab12cd34",
        "folding letters inside ids: ab_x1y2\u212az3w4q req-ab\u017fcd12",
    ]
    for text in samples:
        assert mask_volatile(text) == _VOLATILE_SPEC.sub("#", text)
        assert mask_volatile(text) != text


_VALUES = st.sampled_from(
    [
        *("2024-01-02 10:00:00Z", "2024-01-02 10:00", "2024-01-02T10:00:00+01:00", "10:00:00"),
        *("9f1c2b7e-4a3d-4e5f-8a9b-0c1d2e3f4a5b", "0123456789abcdef01", "toolu_01ABCdef234"),
        *('{"call_id":"call_x9Y8z7"}', '"D681PevKs"', "run-7f3a9c2e1b", "ab_x1y2z3w4q"),
    ]
)
_WORDY = st.lists(
    st.tuples(
        # mostly distinct words (a sketch needs 20), in both cases
        st.builds(
            "{}{}".format, st.text(alphabet="abcXYZ", min_size=1, max_size=4), st.integers(0, 999)
        )
        | _VALUES
        | _PIECES,
        st.sampled_from([" ", "_", "\x00", "-", "\x7f", "\n", ".", "\t", "\u00e9", "\u2014"]),
    ),
    min_size=25,
    max_size=60,
).map(lambda pairs: "".join(w + sep for w, sep in pairs))


def _reference_sketch(text: str) -> list[int] | None:
    """page_sketch by its definition: the distinct words (regex words, lower-cased) of
    4+ characters in the first 2,000 characters, hashed, the 64 smallest."""
    import xxhash

    words = {w for w in re.findall(r"[^\W_]+", text[:2000].lower()) if len(w) >= 4}
    if len(words) < 12:
        return None
    return sorted(xxhash.xxh32_intdigest(w.encode("utf-8", "surrogatepass")) for w in words)[:64]


@given(_WORDY | st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
def test_the_sketch_reads_the_same_words_on_the_ascii_fast_path(text: str) -> None:
    from loopwatch.fingerprints import page_sketch

    assert page_sketch(text) == _reference_sketch(text)


def test_the_sketch_splits_ascii_words_at_control_characters_and_underscores() -> None:
    from loopwatch.fingerprints import page_sketch

    for sep in ("\x00", "\x7f", "_", "\x1b", "-", "\u2014"):
        text = sep.join(f"Word{i}" for i in range(30))
        assert page_sketch(text) is not None and page_sketch(text) == _reference_sketch(text)
    # short words are not read, and too few long ones make no sketch
    assert page_sketch(" ".join(f"w{i}" for i in range(100))) is None


_HASHES = st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 40), max_size=90).map(
    lambda xs: sorted(xs)[:64]
)


@given(a=_HASHES, b=_HASHES)
@example(a=[], b=[])
@example(a=[3, 3, 5], b=[3, 5, 5])  # colliding hashes count once
def test_sketch_similarity_is_the_share_of_the_smallest_union_hashes_both_hold(
    a: list[int], b: list[int]
) -> None:
    """The merge walk gives the bottom-k estimate as its definition states it."""
    union = sorted(set(a) | set(b))[:64]
    expected = sum(1 for h in union if h in a and h in b) / len(union) if union else 0.0
    assert sketch_similarity(a, b) == expected


@given(
    st.text(alphabet=st.sampled_from(list("ab <>/\t\n\u00a0\u2003\u200b\x1c\x85")), max_size=420)
    | st.text(max_size=120)
)
@example("<b>" + "x" * 45 + "</b>")
@example("x " * 30)
def test_contentless_is_its_pattern(text: str) -> None:
    """contentless skips its regex for a short text and for one without markup: the
    same answer as the pattern (markup and whitespace taken out, under 40 left)."""
    from loopwatch.text import _ACK_CHARS, _MARKUP, contentless

    expected = len(text) <= 400 and len(_MARKUP.sub("", text)) < _ACK_CHARS
    assert contentless(text) == expected


@given(
    st.text(max_size=30)
    | st.sampled_from(["src/m3.py", "AB12", "a@b", "x\u00b2", "#tag", "foo.com", "etc/hosts"])
)
def test_a_word_with_a_mark_is_one_with_a_digit_or_a_sign(word: str) -> None:
    from loopwatch.text import _has_mark

    assert _has_mark(word) == any(c.isdigit() or c in "_@#./" for c in word)


_VALUE = st.text(alphabet=st.sampled_from(list("abc 12/_-\u00e9")), min_size=0, max_size=30)


@given(
    st.dictionaries(st.sampled_from(["q", "id", "path", "n"]), _VALUE | st.integers(), max_size=4),
    st.lists(st.integers(0, 5), max_size=6),
    _VALUE,
)
@example({"q": "famous bhavageete"}, [0, 0], "Could not find ")
def test_a_result_forgets_its_call_the_same_from_values_or_from_digests(
    args: dict[str, object], picks: list[int], filler: str
) -> None:
    """A result that quotes its call's arguments is keyed without them, found from the
    values held in memory or from their digests read from a store: the same key."""
    from loopwatch.text import echo_digest, echo_values, said_of

    values = echo_values(said_of(args))
    quoted = [values[i % len(values)] for i in picks] if values else []
    text = filler + filler.join(quoted) + " done"
    digests = [d for d in (echo_digest(v) for v in values) if d is not None]
    from_values = Event("tool_result", "t", None, text)
    from_values.forget_echoes([], "c1", values)
    from_digests = Event("tool_result", "t", None, text)
    from_digests.forget_echoes(digests, "c1")
    assert from_values.result_key == from_digests.result_key


_FIELD_VALUES = st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4)
_EVENT_FIELDS = st.sampled_from(
    ["kind", "name", "args", "text", "id", "parent", "type", "error", "tokens", "cost",
     "agent", "to", "unknown", "ts", "custom"]
)  # fmt: skip


@given(st.dictionaries(_EVENT_FIELDS, _FIELD_VALUES, max_size=5))
@example({"kind": "tool_call", "name": "a", "args": None, "agent": "b"})  # a None held
@example({"kind": "tool_call", "name": "a", "args": {"q": 1}, "agent": "b"})  # one rare field
@example({"kind": "model", "text": "x", "custom": 1})  # a field of its own
@example({"kind": "model", "text": "x", "tokens": 3, "cost": 0.5})
@example({"kind": None, "tokens": "NAN", "cost": "inf"})  # no finite count: not recorded
def test_an_event_reads_every_field_it_is_given(data: dict[str, Any]) -> None:
    """Event.from_dict skips the rarer fields when the common ones account for every
    key: whatever the dict holds, each field reads as it is given, and the others are
    kept as the event's own."""
    from loopwatch.events import TOOL_RESULT
    from loopwatch.fingerprints import looks_like_error

    ev = Event.from_dict(data)

    def as_str(field: str) -> str | None:
        value = data.get(field)
        return None if value is None else str(value)

    assert (ev.name, ev.id, ev.parent, ev.type, ev.agent, ev.to) == tuple(
        as_str(f) for f in ("name", "id", "parent", "type", "agent", "to")
    )
    assert ev.args == data.get("args")
    kind = data.get("kind")
    assert ev.kind == (kind if isinstance(kind, str) else "")
    text = data.get("text")
    assert ev.text == ("" if text is None else text if isinstance(text, str) else json.dumps(text))
    error = data.get("error")
    failed = error in (True, 1, "true", "True", "TRUE") if error is not None else None
    if failed is None:
        failed = kind == TOOL_RESULT and looks_like_error(ev.text)
    assert ev.error == failed
    for field in ("tokens", "cost"):
        value = data.get(field)
        try:
            expected = float(value) if value is not None else 0.0
        except (TypeError, ValueError):
            expected = 0.0
        if not math.isfinite(expected):
            expected = 0.0  # "NaN", "inf": no count, as if not recorded
        assert getattr(ev, field) == expected
    known = {"kind", "name", "args", "text", "id", "parent", "type", "error", "tokens",
             "cost", "agent", "to", "unknown"}  # fmt: skip
    own = {k: v for k, v in data.items() if k not in known}
    assert ev.extra == (own or None)
    # a result without its text did not record it (FORMAT.md): unknown, like one that
    # says so
    unrecorded = data.get("unknown") == "text" or (kind == TOOL_RESULT and text is None)
    assert ev.text_known == (not unrecorded)


_SPACING = st.sampled_from([" ", " ", " ", "  ", "\t", "\n", "\r\n", "\x1c", "\x0b", ""])


@given(
    st.lists(
        st.tuples(_ASCII_IDS | _ASCII_CHARS | _PIECES.filter(str.isascii), _SPACING),
        max_size=14,
    ).map(lambda parts: "".join(word + space for word, space in parts))
)
@example("result of web_search #2: the agent reads src/m3.py")  # a path with a digit
@example("id 9f1c2b7e-4a3d-4e5f-8a9b-0c1d2e3f4a5b done")  # a value to mask
@example(" leading and trailing ")
@example("")
def test_a_text_already_folded_with_nothing_to_mask_is_its_own_key_text(text: str) -> None:
    """fold_and_mask gives back the text itself (and result_key hashes it once) exactly
    when splitting, masking and joining its words would give the same text: a text
    whose words are one space apart and hold nothing to mask."""
    from loopwatch.fingerprints import _already_folded, _masked, fold_and_mask

    assume(not re.search("duration|elapsed|latency|took", text, re.IGNORECASE))  # no timings
    slow = " ".join(_masked(text.split()))
    assert fold_and_mask(text) == slow
    assert _already_folded(text) == (slow == text)
    if slow == text:
        assert fold_and_mask(text) is text
        plain = Event("tool_result", "t", text=text)
        spaced = Event("tool_result", "t", text=f" {text}\n")
        assert plain.result_key == spaced.result_key


_ARG_VALUES = st.lists(
    st.text(alphabet=string.ascii_letters + string.digits + " _-.,é", max_size=30)
    | st.text(max_size=30)
    | st.integers(),
    max_size=6,
)


@given(_ARG_VALUES, _ARG_VALUES)
def test_word_marks_compare_words_without_keeping_them(a: list[Any], b: list[Any]) -> None:
    """A call's word marks are at most 16 sorted 32-bit ints, never its words; two calls'
    likeness is symmetric, within [0, 1], and 1 for the same words in another order,
    case or spacing."""
    from loopwatch.text import word_marks, words_alike

    ma, mb = word_marks(a), word_marks(b)
    assert len(ma) <= 16 and ma == sorted(set(ma))
    assert all(isinstance(m, int) and 0 <= m < 2**32 for m in ma)
    assert 0.0 <= words_alike(ma, mb) == words_alike(mb, ma) <= 1.0
    # the same words in another order, case (ASCII: "ß".upper() is "SS") and spacing
    same = [" ".join(str(v).swapcase().split()[::-1]) if str(v).isascii() else v for v in a]
    if ma:
        assert words_alike(ma, word_marks(same)) == 1.0
