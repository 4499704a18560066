"""Cross-encoder reranking of retrieved candidates behind one small interface.

A cross-encoder reads query and passage together, so it ranks far better than the
bi-encoder vectors and BM25 that found the candidates, but costs one transformer forward
pass per pair: it only ever sees the top ``rerank_window`` hits. As in embedding.py the base
class owns what must behave identically whatever computes the scores — batching, input
checks, order, error wrapping, the time budget — and a backend turns one batch of pairs into
scores. Models load lazily: building a reranker is free and touches neither disk nor network.

Scores are the model's raw logits (no sigmoid) from every backend: they only have to order
passages for one query, sigmoid does not change that order, and in float32 it saturates to
exactly 1.0 for logits above ~17, which would turn the best hits into ties.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from es_rag.errors import ConfigurationError, RerankError
from es_rag.models import LazyModel, auto_device
from es_rag.types import Hit

if TYPE_CHECKING:
    from es_rag.config import Settings

__all__ = [
    "DEFAULT_FLAG_RERANKER",
    "CrossEncoderReranker",
    "FlagReranker",
    "Reranker",
    "build_reranker",
]

logger = logging.getLogger(__name__)

DEFAULT_FLAG_RERANKER = "BAAI/bge-reranker-v2-m3"


class Reranker(ABC):
    """Subclasses implement ONE method, score_batch.

    Batching, checks and error wrapping live here so that every backend gets them right.
    """

    #: short tag used in names and error messages; subclasses override it.
    backend: str = "custom"

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 16,
        max_length: int = 512,
        timeout: float | None = None,
    ) -> None:
        if not model:
            raise ConfigurationError("a reranker needs a model name or path")
        if batch_size < 1:
            raise ConfigurationError(f"rerank batch_size must be >= 1, got {batch_size}")
        if max_length < 2:
            raise ConfigurationError(f"rerank max_length must be >= 2, got {max_length}")
        if timeout is not None and not timeout > 0:
            raise ConfigurationError(f"rerank timeout must be > 0 seconds, got {timeout}")
        self.model = model
        self.batch_size = batch_size
        self.max_length = max_length
        # A budget checked between batches: a running forward pass cannot be interrupted,
        # so one batch may overrun it; small batches keep the overrun small.
        self.timeout = timeout

    # --- the one method a backend writes -----------------------------------------------------
    @abstractmethod
    def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Score one batch of (query, passage) pairs; one float per pair, in order."""

    # --- public API ---------------------------------------------------------------------------
    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """Relevance of each passage to the query, in input order (higher is more relevant).

        Any failure, and running past the time budget, raises RerankError, so that a caller
        can fall back to the retrieval order with one ``except``.
        """
        if not isinstance(query, str):
            raise TypeError(f"query is {type(query).__name__}, not str")
        if isinstance(passages, str):
            # A str is a Sequence[str]: scoring it would rank its characters.
            raise TypeError("score() takes a sequence of passages, not one string")
        items = list(passages)
        for i, passage in enumerate(items):
            if not isinstance(passage, str):
                raise TypeError(f"passage #{i} is {type(passage).__name__}, not str")
        if not items:
            return []

        # Loading (seconds for a 2 GB model) is not charged to this call's budget; a server
        # calls load() at start-up so that the first query does not pay for it either.
        self.load()
        started = time.monotonic()
        scores: list[float] = []
        for start in range(0, len(items), self.batch_size):
            if self.timeout is not None and start > 0:
                elapsed = time.monotonic() - started
                if elapsed > self.timeout:
                    raise RerankError(
                        f"{self.backend} reranking ran out of time: {elapsed:.2f}s > "
                        f"{self.timeout:g}s budget after {start} of {len(items)} passages"
                        f" (model {self.model})"
                    )
            batch = items[start : start + self.batch_size]
            try:
                raw = self.score_batch([(query, passage) for passage in batch])
            except RerankError:
                raise
            except Exception as exc:
                raise RerankError(
                    f"{self.backend} reranking failed on passages {start}..{start + len(batch) - 1}"
                    f" (model {self.model}): {type(exc).__name__}: {exc}"
                ) from exc
            scores.extend(self._check_batch(raw, len(batch), start))
        return scores

    def load(self) -> None:
        """Load the model now instead of on the first score(); raises RerankError."""
        return  # nothing to load for a backend without a local model

    @property
    def name(self) -> str:
        """Backend and model, for logs and for the explanation attached to results."""
        return f"{self.backend}:{self.model}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, batch_size={self.batch_size})"

    # --- helpers ------------------------------------------------------------------------------
    def _check_batch(self, raw: Any, expected: int, start: int) -> list[float]:
        where = f"passages {start}..{start + expected - 1}"
        try:
            values = [float(value) for value in raw]
        except (TypeError, ValueError) as exc:
            raise RerankError(
                f"{self.backend} returned something that is not a list of numbers ({where}): {exc}"
            ) from exc
        if len(values) != expected:
            raise RerankError(
                f"{self.backend} returned {len(values)} scores for {expected} pairs ({where})"
            )
        if not all(math.isfinite(value) for value in values):
            # fp16 overflow and broken weights show up as NaN/inf; sorting on NaN is arbitrary.
            raise RerankError(f"{self.backend} returned NaN or infinite scores ({where})")
        return values


class _LocalModelReranker(Reranker):
    """Shared plumbing of in-process torch backends: device, lazy thread-safe load."""

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 16,
        max_length: int = 512,
        timeout: float | None = None,
        device: str | None = None,
    ) -> None:
        super().__init__(model=model, batch_size=batch_size, max_length=max_length, timeout=timeout)
        self.device = device
        self._device_resolved: str | None = None
        # Web servers and worker thread pools may share one reranker: loaded exactly once.
        self._model = LazyModel(
            self._load,
            error=RerankError,
            what=f"{self.backend} reranker model {model!r}",
            check=lambda: _check_local_path(self.model),
        )

    @property
    def loaded(self) -> bool:
        return self._model.loaded

    def _get_model(self) -> Any:
        return self._model.get()

    def load(self) -> None:
        self._get_model()

    def _resolve_device(self) -> str:
        device = self.device or auto_device()
        self._device_resolved = device
        return device

    @abstractmethod
    def _load(self) -> Any:
        """Build the library object; called once, under the lock."""


class FlagReranker(_LocalModelReranker):
    """FlagEmbedding's encoder-only FlagReranker (bge-reranker-v2-m3 and other BERT-likes)."""

    backend = "flag"

    def __init__(
        self,
        *,
        model: str = DEFAULT_FLAG_RERANKER,
        batch_size: int = 16,
        max_length: int = 512,
        timeout: float | None = None,
        device: str | None = None,
        use_fp16: bool = True,
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            max_length=max_length,
            timeout=timeout,
            device=device,
        )
        #: a wish: honoured on CUDA only (see _load).
        self.use_fp16 = use_fp16

    def _load(self) -> Any:
        from FlagEmbedding import FlagReranker as LibFlagReranker

        device = self._resolve_device()
        # Quirks of FlagEmbedding 1.4.2's FlagReranker:
        # * devices=None means "every visible GPU" and then starts a multi-process pool
        #   (spawn); one explicit device keeps inference in this process.
        # * use_fp16 would be dropped on "cpu" by compute_score, but kept on "mps", where half
        #   precision is not reliably faster; we ask for it on CUDA only.
        # * normalize=False (its default) returns raw logits; True applies a sigmoid.
        # * Unknown keyword arguments are silently set as attributes and later passed to the
        #   tokenizer, so a typo there fails late, or not at all; we pass none.
        flag = LibFlagReranker(
            self.model,
            use_fp16=self.use_fp16 and device.startswith("cuda"),
            devices=device,
            batch_size=self.batch_size,
            max_length=self.max_length,
            normalize=False,
        )
        _check_classifier(self.model, flag.model.config)
        # Its preparation (which score_batch reuses) tokenizes pairs one by one and then calls
        # tokenizer.pad, which makes a fast tokenizer log "using the __call__ method is
        # faster" once per load; the cost is negligible for a rerank window, so mute it.
        if getattr(flag.tokenizer, "deprecation_warnings", None) is not None:
            flag.tokenizer.deprecation_warnings["Asking-to-pad-a-fast-tokenizer"] = True
        # compute_score would move (and cast) the model on every call; we do it once.
        if flag.use_fp16:
            flag.model.half()
        flag.model.to(device)
        flag.model.eval()
        return flag

    def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
        import torch
        from FlagEmbedding.utils.tokenizer_compat import pad_with_compat, prepare_for_model_compat

        flag = self._get_model()
        # Quirk: FlagReranker.compute_score (compute_score_single_gpu) first runs a trial
        # forward pass on the first batch to find a batch size that fits, then computes every
        # batch again, so with one batch per call (our case) each pair is scored twice: half
        # the throughput, measured as two forward calls per call. It also shows tqdm bars when
        # len(pairs) >= its batch size, and swallows any RuntimeError from that trial pass
        # (shrinking the batch instead of reporting it). We therefore run its own input
        # preparation and model here, once; an integration test checks the scores equal
        # compute_score's. The preparation is its: the query is cut to 3/4 of max_length
        # on its own, then only the passage is truncated to fit.
        tokenizer = flag.tokenizer
        query_max_length = flag.query_max_length or self.max_length * 3 // 4
        queries = tokenizer(
            [query for query, _ in pairs],
            add_special_tokens=False,
            max_length=query_max_length,
            truncation=True,
        )["input_ids"]
        passages = tokenizer(
            [passage for _, passage in pairs],
            add_special_tokens=False,
            max_length=self.max_length,
            truncation=True,
        )["input_ids"]
        items = [
            prepare_for_model_compat(
                tokenizer,
                q_ids,
                p_ids,
                truncation="only_second",
                max_length=self.max_length,
                padding=False,
            )
            for q_ids, p_ids in zip(queries, passages, strict=True)
        ]
        inputs = pad_with_compat(tokenizer, items, padding=True, return_tensors="pt").to(
            self._device_resolved
        )
        with torch.inference_mode():
            logits = flag.model(**inputs, return_dict=True).logits
        scores: list[float] = logits.view(-1).float().cpu().tolist()
        return scores


class CrossEncoderReranker(_LocalModelReranker):
    """sentence-transformers CrossEncoder: any sequence-classification model with one label."""

    backend = "cross-encoder"

    def _load(self) -> Any:
        import torch
        from sentence_transformers import CrossEncoder

        device = self._resolve_device()
        # Quirk: with num_labels=1 CrossEncoder applies a sigmoid by default (or whatever
        # activation the folder's config names); Identity gives the raw logits that the
        # flag backend returns too, so the two backends score the same model identically.
        ce = CrossEncoder(
            self.model,
            device=device,
            max_length=self.max_length,
            activation_fn=torch.nn.Identity(),
        )
        config = getattr(ce, "config", None)  # the transformers config (sentence-transformers 5)
        if config is not None:
            _check_classifier(self.model, config)
        elif ce.num_labels != 1:
            raise ConfigurationError(
                f"{self.model!r} has {ce.num_labels} output labels; a reranker needs exactly 1"
            )
        return ce

    def score_batch(self, pairs: list[tuple[str, str]]) -> list[float]:
        ce = self._get_model()
        # batch_size=len(pairs): the base class batches, predict() must not re-batch.
        # prompt="": like SentenceTransformer.encode, predict() would otherwise prepend the
        # folder's default prompt (config default_prompt_name) to every query.
        # A list of (query, passage) tuples is a batch; a lone ["q", "p"] list would be taken
        # as ONE pair by is_singular_input, which is why we always pass tuples in a list.
        scores = ce.predict(
            pairs,
            batch_size=len(pairs),
            show_progress_bar=False,
            convert_to_numpy=True,
            prompt="",
        )
        values: list[float] = scores.reshape(-1).tolist()
        return values


def rerank_hits(
    reranker: Reranker | None,
    question: str,
    hits: list[Hit],
    *,
    window: int,
    timeout: float,
) -> tuple[list[Hit], bool, str | None]:
    """(hits with the top ``window`` reordered by the cross-encoder, reranked?, why not).

    Never fails the query: a reranker that raises or runs past ``timeout`` seconds leaves
    the fused order, and says why. The title path goes with each passage (as it does into
    the embedding) so that headings count.
    """
    top = hits[:window]
    if reranker is None or not top:
        return hits, False, "nothing to rerank" if reranker else "no reranker"
    texts = [f"{' > '.join(h.title_path)}\n{h.text}" if h.title_path else h.text for h in top]
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["scores"] = reranker.score(question, texts)
        except Exception as exc:  # any failure degrades to the fused order
            box["error"] = exc

    thread = threading.Thread(target=work, name="es-rag-rerank", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return hits, False, f"rerank exceeded its {timeout:g} s budget"
    if "error" in box:
        exc = box["error"]
        return hits, False, f"rerank failed: {type(exc).__name__}: {exc}"
    scores: list[float] = box["scores"]
    for hit, value in zip(top, scores, strict=True):
        hit.scores["rerank"] = float(value)
        hit.explain["rerank"] = float(value)
    order = sorted(range(len(top)), key=lambda i: (-scores[i], i))
    reordered = [top[i] for i in order]
    for hit in reordered:
        hit.score = float(hit.scores["rerank"] or 0.0)
    return reordered + hits[len(top) :], True, None


def build_reranker(settings: Settings) -> Reranker | None:
    """The reranker the settings describe, or None when reranking is off (nothing loads yet)."""
    model = (settings.rerank_model or "").strip()
    if not model:
        return None
    backend = settings.rerank_backend
    if backend == "flag":
        return FlagReranker(
            model=model,
            batch_size=settings.rerank_batch_size,
            max_length=settings.rerank_max_length,
            timeout=settings.rerank_timeout,
            device=settings.device,
            use_fp16=settings.rerank_fp16,
        )
    if backend == "cross-encoder":
        return CrossEncoderReranker(
            model=model,
            batch_size=settings.rerank_batch_size,
            max_length=settings.rerank_max_length,
            timeout=settings.rerank_timeout,
            device=settings.device,
        )
    raise ConfigurationError(f"unknown rerank backend {backend!r}")


def _check_classifier(model: str, config: Any) -> None:
    """Refuse folders that are not single-score cross-encoders, before they score nonsense.

    Both libraries load ANY encoder folder (a bi-encoder such as all-MiniLM-L6-v2 included)
    as a sequence classifier with a freshly, randomly initialised head and only log a
    warning; CrossEncoder even sizes that head to 1 label, so its scores look plausible.
    """
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(a.endswith("ForSequenceClassification") for a in architectures):
        raise ConfigurationError(
            f"{model!r} is not a cross-encoder: its architectures are {architectures}, with no"
            " sequence-classification head (the library would score with a random one)"
        )
    labels = getattr(config, "num_labels", 1)
    if labels != 1:
        # The logits would be (batch, labels): compute_score flattens them into a list
        # `labels` times too long, predict() returns a vector per pair.
        raise ConfigurationError(
            f"{model!r} has {labels} output labels; a reranker needs exactly 1"
        )


def _check_local_path(model: str) -> None:
    """A model given as a path that is not there: say so, instead of a hub lookup's error.

    Hub ids look like relative paths ("BAAI/bge-reranker-v2-m3"), so only names that can
    only be paths (absolute, ~, ./ or ../) are checked here.
    """
    if (
        not model.startswith(("/", "~", "./", "../", ".\\", "..\\"))
        and not Path(model).is_absolute()
    ):
        return
    path = Path(model).expanduser()
    if not path.exists():
        raise RerankError(f"reranker model folder {model!r} does not exist")
    if not path.is_dir():
        raise RerankError(f"reranker model {model!r} is a file; give the model's folder")
    if not (path / "config.json").is_file():
        raise RerankError(f"reranker model folder {model!r} has no config.json")
