"""The text helpers' fast paths read text as their plain definitions do."""

from __future__ import annotations

import re

from hypothesis import example, given
from hypothesis import strategies as st

from loopwatch.detectors import narration
from loopwatch.fingerprints import lower_text, normalise_text
from loopwatch.redact import _ascii_lower
from loopwatch.text import phrase_lower, request_words, specifics, split_words, word_set

_PUNCTUATION = str.maketrans({c: " " for c in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"})
# any text, lone surrogates included (traces carry them: see the Redis store's tests)
texts = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)


@given(texts)
@example("Hello, I don\u2019t have it. Can you CHECK? \ud800 Caf\u00c9!")
@example("ΟΔΟΣ ΚΑΙ ΛΟΓΟΣ.")  # a final capital sigma: "ς", as Python writes it
def test_words_are_split_as_lower_case_without_ascii_punctuation(text: str) -> None:
    assert split_words(text) == text.lower().translate(_PUNCTUATION).split()


@given(texts)
@example("Bearer ABC\u00c9def \udcff TOKEN=Xy")
def test_redaction_lower_cases_ascii_letters_only_one_for_one(text: str) -> None:
    expected = text.translate({c: c + 32 for c in range(65, 91)})
    assert _ascii_lower(text) == expected
    assert len(_ascii_lower(text)) == len(text)


@given(texts)
@example("I don\u2019t have it, I\u2018ll look; it\u02bcs gone")
def test_typographic_apostrophes_read_as_plain_ones(text: str) -> None:
    expected = text.lower()
    for typographic in ("\u2019", "\u2018", "\u02bc"):
        expected = expected.replace(typographic, "'")
    assert phrase_lower(text) == expected


_NAME_AS_WRITTEN = re.compile(
    r"(?<=[\w,;)\]%'\"\u201d-]) ([A-Z][\w$+/%-]*)|\b([A-Z][A-Z0-9/&+-]+)\b"
)
name_texts = (
    st.lists(
        st.sampled_from(["I saw ", "Paris", "NASA", " ", "x", ",", "Z", "A-B", "9", "\u201d", "_"]),
        max_size=12,
    ).map("".join)
    | texts
)


@given(name_texts)
@example("Then I saw Paris, NASA and A-B9 at US/EU.")
def test_names_are_read_as_the_pattern_that_opens_with_the_lookbehind(text: str) -> None:
    expected = [a or b for a, b in _NAME_AS_WRITTEN.findall(text)]
    assert narration._NAME.findall(text) == expected


@given(st.text(st.sampled_from("ΣσςΟΔΑoa1 .,_"), max_size=40))
@example("ΟΔΟΣ ΚΑΙ ΛΟΓΟΣ, Σ ΑΣ1.")
def test_text_is_lower_cased_as_python_does_in_both_builds(text: str) -> None:
    """A final capital sigma is "ς" in every key and word set, in the compiled build as
    in the pure one (mypyc's own lower() wrote "σ": "ΟΔΟΣ" and "οδος" were two words
    there and one here)."""
    low = text.lower()
    assert lower_text(text) == low
    assert normalise_text(text) == normalise_text(low)
    assert request_words(text) == request_words(low)
    assert word_set(text) == word_set(low)
    assert specifics(text) == specifics(low)
