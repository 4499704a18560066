"""sentence-transformers on ONNX Runtime (ES_RAG_EMBEDDING_RUNTIME): the real MiniLM, exported
once into a temporary cache, against its torch vectors; versions, recipes and errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from es_rag.config import EmbeddingRuntime, Settings
from es_rag.embedding import SentenceTransformerEmbedder, build_embedder
from es_rag.embedding.local import int8_scheme
from es_rag.engine.mapping import recorded_settings
from es_rag.errors import ConfigurationError, EmbeddingError
from es_rag.generations import same_recipe
from tests.conftest import missing

pytestmark = pytest.mark.unit

TEXTS = [
    "what similarity laws must be obeyed when constructing aeroelastic models of heated "
    "high speed aircraft",
    "The boundary layer on a flat plate in supersonic flow thickens downstream of the "
    "leading edge, and heat transfer to the wall falls as the layer grows.",
    "experimental investigation of the aerodynamics of a wing in a slipstream",
    "Buckling of thin cylindrical shells under axial compression and external pressure.",
    "空气动力学中的边界层理论",
]


@pytest.fixture(scope="module")
def onnx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import onnxruntime  # noqa: F401
        import optimum.onnxruntime  # noqa: F401
    except ImportError as exc:
        missing(f"ONNX Runtime / Optimum not installed ({exc}): pip install -e '.[dev]'")
    return tmp_path_factory.mktemp("onnx-cache")


def _embedder(
    minilm_path: str, runtime: EmbeddingRuntime, cache: Path
) -> SentenceTransformerEmbedder:
    settings = Settings(
        embedding_model=minilm_path,
        embedding_runtime=runtime,
        embedding_onnx_cache=cache,
        device="cpu",
    )
    embedder = build_embedder(settings)
    assert isinstance(embedder, SentenceTransformerEmbedder)
    return embedder


@pytest.fixture(scope="module")
def embedders(minilm_path: str, onnx_cache: Path) -> dict[str, SentenceTransformerEmbedder]:
    runtimes: tuple[EmbeddingRuntime, ...] = ("torch", "onnx", "onnx-int8")
    return {rt: _embedder(minilm_path, rt, onnx_cache) for rt in runtimes}


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # embed() normalises, so the row-wise dot product is the cosine.
    return np.asarray((a * b).sum(axis=1))


def test_onnx_fp32_vectors_match_torch(embedders: dict[str, SentenceTransformerEmbedder]) -> None:
    torch_vecs = embedders["torch"].embed(TEXTS)
    onnx_vecs = embedders["onnx"].embed(TEXTS)
    assert onnx_vecs.shape == torch_vecs.shape == (len(TEXTS), 384)
    assert _cosines(torch_vecs, onnx_vecs).min() >= 0.999
    queries = embedders["onnx"].embed(TEXTS[:2], kind="query")
    assert _cosines(embedders["torch"].embed(TEXTS[:2], kind="query"), queries).min() >= 0.999
    # fp32 does not depend on the batch a text is embedded in (int8's dynamic scales do).
    alone = embedders["onnx"].embed(TEXTS[:1])
    assert np.allclose(alone, onnx_vecs[:1], atol=1e-5)


def test_onnx_int8_vectors_are_close_to_torch(
    embedders: dict[str, SentenceTransformerEmbedder],
) -> None:
    cosines = _cosines(embedders["torch"].embed(TEXTS), embedders["onnx-int8"].embed(TEXTS))
    assert cosines.min() >= 0.98
    # Quantised, not merely a copy of the fp32 model.
    assert cosines.min() < 0.9999


def test_exports_are_cached_outside_the_model_folder_and_reused(
    embedders: dict[str, SentenceTransformerEmbedder], minilm_path: str, onnx_cache: Path
) -> None:
    embedders["onnx-int8"].embed(TEXTS[:1])
    folders = [p for p in onnx_cache.iterdir()]
    # One folder per model content; no temporary folder left behind.
    assert [p.name for p in folders] == [embedders["onnx"].onnx_folder().name]
    onnx_files = sorted(p.name for p in (folders[0] / "onnx").iterdir())
    assert onnx_files == ["model.onnx", f"model_int8_{int8_scheme()}.onnx"]
    assert not (Path(minilm_path) / "onnx").exists()
    stamps = {p: p.stat().st_mtime_ns for p in (folders[0] / "onnx").iterdir()}
    again = _embedder(minilm_path, "onnx-int8", onnx_cache)
    again.embed(TEXTS[:1])
    assert {p: p.stat().st_mtime_ns for p in (folders[0] / "onnx").iterdir()} == stamps


def test_the_runtime_is_part_of_the_embedding_version(
    embedders: dict[str, SentenceTransformerEmbedder],
) -> None:
    versions = {rt: e.embedding_version for rt, e in embedders.items()}
    assert len(set(versions.values())) == 3
    # torch adds nothing, so indexes made before the setting existed keep their version.
    assert "rt=" not in versions["torch"]
    assert versions["onnx"] == versions["torch"] + ":rt=onnx"
    assert versions["onnx-int8"] == versions["torch"] + f":rt=onnx-int8/{int8_scheme()}"
    # New embedders (a fingerprint remembered on disk, no load) give the same versions.
    runtimes: tuple[EmbeddingRuntime, ...] = ("torch", "onnx", "onnx-int8")
    cache = embedders["onnx"].onnx_cache
    model = embedders["torch"].model
    assert {rt: _embedder(model, rt, cache).embedding_version for rt in runtimes} == versions
    # Chunks are counted with the same tokenizer and limit whatever runs the model.
    counts = {rt: e.token_counter() for rt, e in embedders.items()}
    assert {limit for _count, limit in counts.values()} == {256}
    assert len({count(TEXTS[1]) for count, _limit in counts.values()}) == 1


def test_a_runtime_other_than_torch_needs_the_sentence_transformers_backend() -> None:
    with pytest.raises(ValidationError, match="sentence-transformers backend only"):
        Settings(embedding_backend="flag", embedding_runtime="onnx")
    with pytest.raises(ValidationError, match="sentence-transformers backend only"):
        Settings(
            embedding_backend="openai", embedding_url="http://x", embedding_runtime="onnx-int8"
        )
    # A recipe copied without validation (a generation's recorded settings) is refused too.
    copied = Settings().model_copy(
        update={"embedding_backend": "flag", "embedding_runtime": "onnx"}
    )
    with pytest.raises(ConfigurationError, match="sentence-transformers backend only"):
        build_embedder(copied)
    assert Settings(embedding_backend="flag").embedding_runtime == "torch"


def test_bad_runtime_values_and_devices_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="runtime must be one of"):
        SentenceTransformerEmbedder(model="m", runtime="tensorrt")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="runs on the CPU"):
        SentenceTransformerEmbedder(model="m", runtime="onnx", device="cuda")
    with pytest.raises(ValidationError):
        Settings(embedding_runtime="openvino")  # type: ignore[arg-type]


@pytest.fixture
def no_optimum(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # A None entry in sys.modules makes the import raise ImportError, as if not installed.
    monkeypatch.setitem(sys.modules, "optimum.onnxruntime", None)
    yield


@pytest.mark.usefixtures("no_optimum")
def test_onnx_without_optimum_names_the_extra_to_install(tmp_path: Path) -> None:
    embedder = SentenceTransformerEmbedder(model="m", runtime="onnx", onnx_cache=tmp_path)
    with pytest.raises(EmbeddingError, match=r"pip install 'es-rag\[onnx\]'"):
        embedder.embed(["x"])
    assert list(tmp_path.iterdir()) == []  # nothing exported, nothing loaded
    # torch needs neither.
    SentenceTransformerEmbedder(model="m")._check_can_load()


def test_recipes_recorded_before_the_runtime_existed_read_as_torch() -> None:
    torch_recipe = recorded_settings(Settings(embedding_model="m"))
    older = {k: v for k, v in torch_recipe.items() if k != "embedding_runtime"}
    assert same_recipe(older, torch_recipe)
    onnx_recipe = recorded_settings(Settings(embedding_model="m", embedding_runtime="onnx"))
    assert not same_recipe(older, onnx_recipe)
    assert not same_recipe(torch_recipe, onnx_recipe)
