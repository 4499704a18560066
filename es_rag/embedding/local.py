"""In-process embedders on torch: sentence-transformers and FlagEmbedding (BGE-M3 dense).

Both load their model once, lazily and thread-safely (es_rag.models), count chunk sizes
with the model's own tokenizer, and fingerprint the model's files so that an index records
exactly which weights made its vectors.
"""

from __future__ import annotations

import hashlib
import json
import logging
from abc import abstractmethod
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np

from es_rag.embedding.base import Embedder, Kind
from es_rag.errors import ConfigurationError, EmbeddingError
from es_rag.models import LazyModel, auto_device

logger = logging.getLogger(__name__)

PoolingMethod = Literal["cls", "mean", "last_token"]
# Files whose bytes decide what a local model computes. Exported runtimes (onnx/, openvino/)
# are skipped: the torch backends never read them, and bge-m3's onnx/ doubles the bytes to hash.
_MODEL_FILE_SUFFIXES = frozenset({".json", ".safetensors", ".bin", ".pt", ".txt", ".model"})
_SKIPPED_MODEL_DIRS = frozenset({"onnx", "openvino", ".git", ".cache"})


class _LocalModelEmbedder(Embedder):
    """Shared plumbing of in-process torch backends: lazy thread-safe load, model fingerprint."""

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        device: str | None = None,
        max_length: int | None = 512,
        revision: str | None = None,
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            dims=dims,
        )
        if max_length is not None and max_length < 1:
            raise ConfigurationError(f"embedding max_length must be >= 1, got {max_length}")
        self.device = device
        self.max_length = max_length
        self.revision = revision
        # Celery thread pools and web servers may share one embedder: loaded exactly once.
        self._model = LazyModel(
            self._load, error=EmbeddingError, what=f"{self.backend} model {model!r}"
        )

    @property
    def loaded(self) -> bool:
        return self._model.loaded

    def _get_model(self) -> Any:
        return self._model.get()

    @abstractmethod
    def _load(self) -> Any:
        """Build the library object; called once, under the lock."""

    def _effective_max_length(self) -> int | None:
        return self.max_length

    def _tokenizer(self) -> Any:
        """The loaded model's Hugging Face tokenizer."""
        return self._get_model().tokenizer

    def token_counter(self) -> tuple[Callable[[str], int], int | None]:
        tokenizer = self._tokenizer()

        def count(text: str) -> int:
            # verbose=False: a long section is counted whole on purpose; no length warning.
            ids = tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]
            return len(ids)

        return count, self._effective_max_length()

    def _model_identity(self) -> str:
        # Load first: a hub name only has a resolvable commit once it sits in the local cache,
        # and the fingerprint must not change between before and after the first embedding.
        self._get_model()
        path = Path(self.model).expanduser()
        if path.is_dir():
            return f"{path.resolve().name}@{_folder_fingerprint(path)}"
        revision = self.revision or _cached_hub_commit(self.model) or "unpinned"
        return f"{self.model}@{revision[:12]}"

    def _version_key(self) -> str | None:
        """The settings plus the model's files by name, size and time (what the per-process
        fingerprint cache keys on too), or the cached hub commit; None for a hub name not
        yet in the local cache (its load decides the commit)."""
        path = Path(self.model).expanduser()
        files: Any
        if path.is_dir():
            files = _model_files(path)[1]
        else:
            files = self.revision or _cached_hub_commit(self.model)
            if files is None:
                return None
        blob = json.dumps([type(self).__name__, self._settings_key(), files], default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    def _version_extras(self) -> list[str]:
        length = self._effective_max_length()
        return [f"len={length}", *super()._version_extras()]


class SentenceTransformerEmbedder(_LocalModelEmbedder):
    """sentence-transformers backend: the model folder's own pooling and modules apply."""

    backend = "st"

    def _load(self) -> Any:
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(self.model, device=self.device, revision=self.revision)
        current = st.max_seq_length
        if self.max_length is not None:
            # The setting is a ceiling, never a raise: all-MiniLM-L6-v2 was trained to 256
            # tokens and bge-m3 allows 8192; going past the model's own limit gives vectors
            # from positions it never learnt (or an index error), so we take the smaller.
            st.max_seq_length = (
                self.max_length if current is None else min(int(current), self.max_length)
            )
        return st

    def _effective_max_length(self) -> int | None:
        length = self._get_model().max_seq_length
        return None if length is None else int(length)

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        st = self._get_model()
        # Quirk: encode() silently prepends the folder's default prompt when
        # config_sentence_transformers.json sets default_prompt_name; prompt="" turns that off
        # so that our query/passage prefixes are the only ones (and the fingerprint is honest).
        # Normalisation is left to the base class so every backend normalises the same way.
        vecs = st.encode(
            texts,
            prompt="",
            batch_size=len(texts),
            convert_to_numpy=True,
            normalize_embeddings=False,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)


class FlagEmbedder(_LocalModelEmbedder):
    """FlagEmbedding BGEM3FlagModel, dense vectors only (sparse/ColBERT heads are not used)."""

    backend = "flag"

    def __init__(
        self,
        *,
        model: str,
        batch_size: int = 32,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        device: str | None = None,
        max_length: int | None = 512,
        revision: str | None = None,
        pooling_method: PoolingMethod = "cls",
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            dims=dims,
            device=device,
            max_length=max_length,
            revision=revision,
        )
        # bge-m3 is CLS-pooled. Any BERT-like folder loads too (e.g. all-MiniLM-L6-v2), but a
        # mean-pooled model then needs pooling_method="mean" to give its intended vectors; with
        # CLS it still gives usable yet weaker vectors.
        self.pooling_method: PoolingMethod = pooling_method
        self._device_resolved: str | None = None

    def _load(self) -> Any:
        if self.revision is not None and not Path(self.model).expanduser().is_dir():
            raise ConfigurationError(
                "FlagEmbedding cannot pin a hub revision; pass a local folder instead"
            )
        from FlagEmbedding import BGEM3FlagModel

        device = self.device or auto_device()
        self._device_resolved = device
        max_length = self.max_length or 8192
        # Quirks of FlagEmbedding 1.4.2:
        # * devices=None means "every visible GPU" and then starts a multi-process pool; one
        #   explicit device keeps inference in this process.
        # * use_fp16 defaults to True and also applies on CPU, where it is slow or unsupported,
        #   so it is switched on for CUDA only.
        # * Folders without colbert_linear.pt/sparse_linear.pt (anything but bge-m3) get
        #   randomly initialised sparse/ColBERT heads (it logs a warning); harmless because only
        #   the dense output is requested.
        flag = BGEM3FlagModel(
            self.model,
            normalize_embeddings=False,  # the base class normalises, identically for all
            use_fp16=device.startswith("cuda"),
            devices=device,
            pooling_method=self.pooling_method,
            batch_size=self.batch_size,
            query_max_length=max_length,
            passage_max_length=max_length,
            return_dense=True,
            return_sparse=False,
            return_colbert_vecs=False,
        )
        # encode() would move and cast the model on every call; we do it once.
        flag.model.to(device)
        flag.model.eval()
        return flag

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        import torch

        flag = self._get_model()
        # Prefixes are already applied by the base class, so both kinds take the same path.
        # Quirk: BGEM3FlagModel.encode() (encode_single_device) first runs a trial forward
        # pass on the first batch to find a batch size that fits, then runs every batch
        # again, so with one batch per call (our case) each batch is computed twice: half
        # the throughput (measured 131-147 vs 250-293 texts/s for MiniLM on 2 CPU cores).
        # It also shows tqdm bars when len(texts) >= batch_size and swallows RuntimeError
        # in that trial pass. We therefore call its tokenizer and its inference module
        # (the same forward encode() uses, dense head only) directly; an integration test
        # checks the result equals encode()'s.
        inputs = flag.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_length or 8192,
            return_tensors="pt",
        ).to(self._device_resolved)
        with torch.inference_mode():
            out = flag.model(
                inputs, return_dense=True, return_sparse=False, return_colbert_vecs=False
            )
        return np.asarray(out["dense_vecs"].float().cpu().numpy(), dtype=np.float32)

    def _version_extras(self) -> list[str]:
        return [f"pool={self.pooling_method}", *super()._version_extras()]


def _cached_hub_commit(repo_id: str) -> str | None:
    """Commit of a hub model already in the local cache, without touching the network."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - a dependency of both torch backends
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except Exception:  # invalid repo ids raise; they simply have no cached commit
        return None
    if isinstance(found, str):
        path = Path(found)
        if path.parent.parent.name == "snapshots":
            return path.parent.name
    return None


def _folder_fingerprint(folder: Path) -> str:
    """12 hex of a content hash of the files that define the model; cached per process."""
    root, key = _model_files(folder)
    return _hash_files(str(root), key)


def _model_files(folder: Path) -> tuple[Path, tuple[tuple[str, int, int], ...]]:
    """The model's files by name, size and modification time: a key that changes when the
    folder is edited, read with a stat() per file rather than gigabytes of hashing."""
    root = folder.resolve()
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in _MODEL_FILE_SUFFIXES
        and not _SKIPPED_MODEL_DIRS.intersection(p.relative_to(root).parts[:-1])
    )
    key = tuple(
        (p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files
    )
    return root, key


@lru_cache(maxsize=32)
def _hash_files(root: str, key: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for rel, size, _mtime in key:
        # Content only (names and sizes, not mtimes): copies of a model hash the same anywhere.
        digest.update(f"{rel}\0{size}\0".encode())
        with open(Path(root) / rel, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    return digest.hexdigest()[:12]
