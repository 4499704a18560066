"""In-process embedders: sentence-transformers and FlagEmbedding (BGE-M3 dense).

Both load their model once, lazily and thread-safely (es_rag.models), count chunk sizes
with the model's own tokenizer, and fingerprint the model's files so that an index records
exactly which weights made its vectors. Both run on torch; sentence-transformers can also
run on ONNX Runtime (``runtime="onnx"`` or ``"onnx-int8"``), from an export made once from
the torch weights and kept in a cache folder.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import shutil
import tempfile
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from es_rag.embedding.autobatch import PROBE_SIZES, BatchChoice, choose_batch_size
from es_rag.embedding.base import Embedder, Kind
from es_rag.errors import ConfigurationError, EmbeddingError
from es_rag.models import LazyModel, auto_device

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

PoolingMethod = Literal["cls", "mean", "last_token"]
Runtime = Literal["torch", "onnx", "onnx-int8"]
RUNTIMES: tuple[Runtime, ...] = ("torch", "onnx", "onnx-int8")
# Dynamic int8 quantisation schemes of sentence-transformers / optimum. arm64, avx512 and
# avx512_vnni quantise alike (uint8 activations, int8 weights per channel); avx2 takes uint8
# weights, because int8 ones can saturate in AVX2's u8*s8 instruction (VPMADDUBSW).
Int8Scheme = Literal["arm64", "avx2", "avx512", "avx512_vnni"]
ONNX_EXTRA_HINT = "pip install 'es-rag[onnx]' (optimum-onnx with onnxruntime)"
# Files whose bytes decide what a local model computes. Exported runtimes (onnx/, openvino/)
# are skipped: the torch backends never read them, and bge-m3's onnx/ doubles the bytes to hash.
_MODEL_FILE_SUFFIXES = frozenset({".json", ".safetensors", ".bin", ".pt", ".txt", ".model"})
_SKIPPED_MODEL_DIRS = frozenset({"onnx", "openvino", ".git", ".cache"})


def auto_batch_size(device: str) -> int:
    """Texts per forward pass when none is set, before any measurement. On a CPU, small
    batches of texts sorted by length pad least: MiniLM on 2 cores, calls of 64 texts, ran
    at 49-51 texts/s in batches of 8-16 against 46 at 32 and 36 at 64 (calls of 600 ran at
    51 whatever the size), and that is final. On a GPU this is only where a loaded model's
    probe starts from (``es_rag.embedding.autobatch``)."""
    return 16 if device.startswith("cpu") else 64


class _LocalModelEmbedder(Embedder):
    """Shared plumbing of in-process torch backends: lazy thread-safe load, model fingerprint."""

    def __init__(
        self,
        *,
        model: str,
        batch_size: int | None = None,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        device: str | None = None,
        max_length: int | None = 512,
        revision: str | None = None,
        streams: int = 1,
    ) -> None:
        super().__init__(
            model=model,
            batch_size=batch_size,
            normalize=normalize,
            query_prefix=query_prefix,
            passage_prefix=passage_prefix,
            dims=dims,
            streams=streams,
        )
        if max_length is not None and max_length < 1:
            raise ConfigurationError(f"embedding max_length must be >= 1, got {max_length}")
        self.device = device
        self.max_length = max_length
        self.revision = revision
        # Celery thread pools and web servers may share one embedder: loaded exactly once.
        self._model = LazyModel(
            self._load,
            error=EmbeddingError,
            what=f"{self.backend} model {model!r}",
            check=self._check_can_load,
        )
        self._probed: BatchChoice | None = None
        self._probe_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._model.loaded

    def _auto_batch_size(self) -> int:
        device = self.device or auto_device()
        if device.startswith("cpu"):
            return auto_batch_size(device)
        return self.probe_batch_size().size

    def probe_batch_size(self, sizes: Sequence[int] = PROBE_SIZES) -> BatchChoice:
        """On a GPU (or MPS): the batch size measured for this model on this card, once per
        process, at the first embedding (a few forward passes of max-length texts; logged)."""
        if self._probed is None:
            with self._probe_lock:
                if self._probed is None:
                    self._probed = self._measure_batch_size(sizes)
        return self._probed

    def _measure_batch_size(self, sizes: Sequence[int]) -> BatchChoice:
        import torch

        self._get_model()  # load outside the timings
        # Texts that fill the model's whole input: the longest a chunk can be bounds memory.
        length = self._effective_max_length() or 512
        text = " ".join(["retrieval"] * length)

        def seconds_for(size: int) -> float:
            texts = [text] * size
            self.embed_batch(texts, kind="passage")  # warm: kernels and allocator for size
            started = time.perf_counter()
            self.embed_batch(texts, kind="passage")  # returns host arrays: synchronised
            return time.perf_counter() - started

        def free_cache() -> None:
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        choice = choose_batch_size(seconds_for, sizes, after_oom=free_cache)
        logger.info(
            "embedding batch size %d for %s on %s, measured at %d tokens (texts/s by size: %s%s)",
            choice.size,
            self.model,
            self.device or auto_device(),
            length,
            ", ".join(f"{k}: {v:.0f}" for k, v in choice.rates.items()),
            f"; stopped: {choice.stopped}" if choice.stopped else "",
        )
        return choice

    def _get_model(self) -> Any:
        return self._model.get()

    def _check_can_load(self) -> None:
        """Raise es-rag's own, clearer error before a load that cannot succeed."""

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
    """sentence-transformers backend: the model folder's own pooling and modules apply.

    ``runtime`` picks what computes the transformer: ``torch`` (the model's own weights),
    ``onnx`` (ONNX Runtime, fp32, CPU) or ``onnx-int8`` (ONNX Runtime with weights
    dynamically quantised to int8, CPU). The ONNX files are exported from the torch weights
    once, offline, into ``onnx_cache`` (never into the model folder) and reused after.
    Dynamic quantisation scales activations per batch, so an int8 vector also depends a
    little on the texts embedded with it (cosine about 0.99); fp32 ONNX does not.
    """

    backend = "st"

    def __init__(
        self,
        *,
        model: str,
        batch_size: int | None = None,
        normalize: bool = True,
        query_prefix: str = "",
        passage_prefix: str = "",
        dims: int | None = None,
        device: str | None = None,
        max_length: int | None = 512,
        revision: str | None = None,
        runtime: Runtime = "torch",
        onnx_cache: str | Path | None = None,
        streams: int = 1,
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
            streams=streams,
        )
        if runtime not in RUNTIMES:
            raise ConfigurationError(
                f"embedding runtime must be one of {', '.join(RUNTIMES)}; got {runtime!r}"
            )
        if runtime != "torch" and device not in (None, "cpu"):
            raise ConfigurationError(
                f"embedding runtime {runtime} runs on the CPU; unset the device (got {device!r})"
                " or use runtime torch"
            )
        self.runtime: Runtime = runtime
        self.onnx_cache = Path(onnx_cache).expanduser() if onnx_cache else default_onnx_cache()

    def _auto_batch_size(self) -> int:
        if self.runtime != "torch":  # ONNX Runtime runs on the CPU here
            return auto_batch_size("cpu")
        return super()._auto_batch_size()

    def _prepare_streams(self) -> bool:
        # torch on the CPU only: a GPU runs one batch at a time anyway, and ONNX Runtime
        # keeps its own thread pool per session.
        if self.runtime != "torch" or (self.device or auto_device()) != "cpu":
            return False
        import torch

        # Each stream gets its share of the process's math threads (which `es-rag worker`
        # already capped at cores / processes), at least one: more streams than threads
        # would only time-slice the cores. torch keeps one count for the process: the
        # threads started after this take it.
        threads = torch.get_num_threads()
        self.streams = min(self.streams, threads)
        if self.streams < 2:
            return False
        torch.set_num_threads(threads // self.streams)
        return True

    @property
    def int8_scheme(self) -> Int8Scheme | None:
        """The int8 quantisation this CPU gets (onnx-int8 only): it names the quantised
        file and goes in the version. Read on first use (construction does no I/O)."""
        return int8_scheme() if self.runtime == "onnx-int8" else None

    def _check_can_load(self) -> None:
        if self.runtime == "torch":
            return
        try:
            import onnxruntime  # noqa: F401
            import optimum.onnxruntime  # noqa: F401
        except ImportError as exc:
            raise EmbeddingError(
                f"embedding runtime {self.runtime} needs ONNX Runtime and Optimum, which are "
                f"not installed ({exc}): {ONNX_EXTRA_HINT}"
            ) from exc

    def _load(self) -> Any:
        from sentence_transformers import SentenceTransformer

        if self.runtime == "torch":
            st = SentenceTransformer(self.model, device=self.device, revision=self.revision)
        else:
            folder = self._onnx_export()
            file_name = "onnx/model.onnx"
            scheme = self.int8_scheme
            if scheme is not None:
                file_name = self._int8_export(folder, scheme)
            st = SentenceTransformer(
                str(folder),
                backend="onnx",
                device="cpu",
                model_kwargs={"file_name": file_name, "provider": "CPUExecutionProvider"},
            )
        current = st.max_seq_length
        if self.max_length is not None:
            # The setting is a ceiling, never a raise: all-MiniLM-L6-v2 was trained to 256
            # tokens and bge-m3 allows 8192; going past the model's own limit gives vectors
            # from positions it never learnt (or an index error), so we take the smaller.
            st.max_seq_length = (
                self.max_length if current is None else min(int(current), self.max_length)
            )
        return st

    # --- ONNX exports ----------------------------------------------------------------------
    def onnx_folder(self) -> Path:
        """Where this model's ONNX export lives: one folder per model content (or commit)."""
        source = Path(self.model).expanduser()
        if source.is_dir():
            key = f"{source.resolve().name}-{_folder_fingerprint(source)}"
        else:
            revision = self.revision or _cached_hub_commit(self.model) or "unpinned"
            key = f"{self.model}-{revision[:12]}"
        return self.onnx_cache / re.sub(r"[^A-Za-z0-9._-]+", "_", key)

    def _onnx_export(self) -> Path:
        """The fp32 export (a sentence-transformers folder with onnx/model.onnx), made once.

        It is written to a temporary folder beside its place and renamed into it, so that
        processes exporting at the same time never see half a folder: the first one wins.
        """
        from sentence_transformers import SentenceTransformer

        final = self.onnx_folder()
        if (final / "onnx" / "model.onnx").is_file():
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        logger.info("exporting %s to ONNX in %s (once)", self.model, final)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            # Optimum loads the torch weights and traces them; nothing is downloaded for a
            # local folder. A hub model may ship its own onnx/model.onnx, which is then used.
            # sentence-transformers warns that the export should be saved (into the model's
            # folder, which may be site-packages): it is, here, so that warning is muted.
            with _quiet_logger("sentence_transformers.backend.utils"):
                exported = SentenceTransformer(
                    self.model,
                    backend="onnx",
                    device="cpu",
                    revision=self.revision,
                    model_kwargs={"provider": "CPUExecutionProvider"},
                )
            exported.save(str(tmp))
            if not (tmp / "onnx" / "model.onnx").is_file():
                raise EmbeddingError(f"the ONNX export of {self.model} made no onnx/model.onnx")
            # A hub model's commit is only known once it is in the local cache.
            final = self.onnx_folder()
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / "onnx" / "model.onnx").is_file():
                    raise  # not another process's finished export: a real failure
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return final

    def _int8_export(self, folder: Path, scheme: Int8Scheme) -> str:
        """The int8 file beside the fp32 one (relative to ``folder``), quantised once."""
        from sentence_transformers import SentenceTransformer, export_dynamic_quantized_onnx_model

        suffix = f"int8_{scheme}"
        relative = f"onnx/model_{suffix}.onnx"
        target = folder / relative
        if target.is_file():
            return relative
        logger.info("quantising the ONNX export in %s to int8 (%s, once)", folder, scheme)
        fp32 = SentenceTransformer(
            str(folder),
            backend="onnx",
            device="cpu",
            model_kwargs={"file_name": "onnx/model.onnx", "provider": "CPUExecutionProvider"},
        )
        with tempfile.TemporaryDirectory(prefix=f".{folder.name}.", dir=folder.parent) as tmp:
            export_dynamic_quantized_onnx_model(fp32, scheme, tmp, file_suffix=suffix)
            # One file, renamed into place: readers see the whole file or none.
            os.replace(Path(tmp) / relative, target)
        return relative

    # --- embedding ---------------------------------------------------------------------------
    def _effective_max_length(self) -> int | None:
        length = self._get_model().max_seq_length
        return None if length is None else int(length)

    def embed_batch(self, texts: list[str], *, kind: Kind) -> np.ndarray:
        import numpy as np

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

    def _settings_key(self) -> dict[str, Any]:
        # The runtime is a plain setting (already in the key); the int8 scheme is read from
        # the CPU, so a fingerprint remembered on one machine is not reused on another.
        key = super()._settings_key()
        if self.int8_scheme is not None:
            key["int8_scheme"] = self.int8_scheme
        return key

    def _version_extras(self) -> list[str]:
        extras = super()._version_extras()
        # ONNX Runtime's vectors differ from torch's in the last digits (fp32) or more
        # (int8): never mixed in one index. torch adds nothing, so existing versions stay.
        if self.runtime == "onnx":
            extras.append("rt=onnx")
        elif self.runtime == "onnx-int8":
            extras.append(f"rt=onnx-int8/{self.int8_scheme}")
        return extras


class FlagEmbedder(_LocalModelEmbedder):
    """FlagEmbedding BGEM3FlagModel, dense vectors only (sparse/ColBERT heads are not used)."""

    backend = "flag"

    def __init__(
        self,
        *,
        model: str,
        batch_size: int | None = None,
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
            # unused (embed_batch below calls the model directly); a probe would need the model
            batch_size=self.batch_size or auto_batch_size(device),
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
        import numpy as np
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


def default_onnx_cache() -> Path:
    """``$XDG_CACHE_HOME/es-rag/onnx``, else ``~/.cache/es-rag/onnx``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return Path(base) / "es-rag" / "onnx"


@lru_cache(maxsize=1)
def int8_scheme() -> Int8Scheme:
    """The dynamic int8 quantisation that suits this CPU (sentence-transformers' names)."""
    machine = platform.machine().lower()
    if machine in ("arm64", "aarch64"):
        return "arm64"
    flags = _cpu_flags()
    if flags & {"avx512_vnni", "avx512vnni", "avx_vnni"}:
        return "avx512_vnni"
    if "avx512f" in flags:
        return "avx512"
    return "avx2"


def _cpu_flags() -> set[str]:
    """The x86 feature flags of /proc/cpuinfo (empty where there is none: not Linux)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        pass
    return set()


@contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """Only errors from logger ``name`` while the block runs."""
    log = logging.getLogger(name)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)
