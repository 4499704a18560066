"""Settings: the one source of defaults.

Every value can come from the environment (prefix ``ES_RAG_``) or be passed explicitly;
CLI flags override both. Settings are passed around as an object, never read from globals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

EmbeddingBackend = Literal["sentence-transformers", "flag", "openai"]
# How the sentence-transformers model runs: torch, or ONNX Runtime (fp32, or dynamically
# quantised to int8 for the CPU); the last two need the `onnx` extra (optimum-onnx).
EmbeddingRuntime = Literal["torch", "onnx", "onnx-int8"]
StrategyName = Literal[
    "auto",
    "bm25",
    "knn",
    "client-rrf",
    "client-linear",
    "client-zscore",
    "native-rrf",
    "opensearch-hybrid",
]
EngineName = Literal["auto", "elasticsearch", "opensearch"]
OpenSearchKnnEngine = Literal["lucene", "faiss", "nmslib"]
Similarity = Literal["cosine", "dot_product", "max_inner_product", "l2_norm"]
RerankBackend = Literal["flag", "cross-encoder"]


class Settings(BaseSettings):
    """es-rag configuration (environment prefix ``ES_RAG_``)."""

    model_config = SettingsConfigDict(env_prefix="ES_RAG_", extra="ignore")

    # --- search server (Elasticsearch or OpenSearch) ---------------------------------------
    engine: EngineName = Field(
        default="auto",
        description="elasticsearch | opensearch; auto asks the server (one GET / at first use)",
    )
    es_url: str = Field(
        default="http://127.0.0.1:9200",
        description="search server URL (either engine); several nodes: comma-separated URLs, "
        "tried in turn when one is down",
    )
    es_api_key: SecretStr | None = None
    es_username: str | None = None
    es_password: SecretStr | None = None
    es_ca_certs: Path | None = None
    es_verify_certs: bool = True
    es_request_timeout: float = 30.0
    es_connections_per_node: int = Field(
        default=32,
        description="HTTP connections kept per node: concurrent searches beyond it wait for one",
    )
    index: str = Field(default="es-rag", description="alias name; concrete indices are <alias>-<n>")

    # --- queue (Celery workers, Redis broker and result backend) ---------------------------
    redis_url: str = "redis://127.0.0.1:6379/0"
    queue: str = Field(default="es-rag", description="the Celery queue every task uses")
    parse_queue: str | None = Field(
        default=None,
        description="split ingestion: read and chunk on this queue (CPU workers), then hand "
        "the document to embed_queue",
    )
    embed_queue: str | None = Field(
        default=None, description="split ingestion: embed and index on this queue (GPU workers)"
    )
    queue_batch_docs: int = Field(
        default=512,
        ge=1,
        description="files sent together go to the workers as batches of at most this many: "
        "parsed one by one, embedded and written together, status rows in one request each "
        "way (1: one task per file); see queue_batch_spread for how big they are made",
    )
    queue_batch_kb: int = Field(
        default=1024,
        ge=0,
        description="a batch closes before its files pass this many KB together",
    )
    queue_batch_file_kb: int = Field(
        default=64,
        ge=0,
        description="a file larger than this (or than a whole batch) is a message of its own: "
        "its own time limit, and a long parse holds no small file back",
    )
    queue_batch_spread: int = Field(
        default=2,
        ge=0,
        description="small files are cut into this many batches per live worker process (as "
        "few and as large as that allows: one embedding call and one bulk stream each); with "
        "no live worker, batches of at most 64 files and 64 KB; 0: fill batches to the caps",
    )
    task_soft_time_limit: int = Field(default=600, description="seconds; the task is told")
    task_time_limit: int = Field(default=900, description="seconds; the task is killed")
    visibility_timeout: int | None = Field(
        default=None,
        description="seconds before Redis redelivers an unacknowledged task (a dead worker's); "
        "default: the hard limit + 300; must exceed the hard limit",
    )
    task_max_retries: int = Field(
        default=10,
        description="retries of a transient failure (server or broker down, 429/5xx); with "
        "the default backoff they span about 10 minutes on average, 18 at most",
    )
    task_retry_backoff_max: int = Field(default=300, description="seconds between retries, max")
    worker_lease_seconds: int = Field(
        default=30,
        description="a worker renews a lease on the tasks it holds; once a worker's lease has "
        "been gone this long, a live worker hands its tasks back to the queue",
    )

    # --- embeddings ---------------------------------------------------------------------
    embedding_backend: EmbeddingBackend = "sentence-transformers"
    embedding_model: str = Field(
        default="BAAI/bge-m3", description="model name or local path (a folder)"
    )
    embedding_url: str | None = Field(
        default=None, description="base URL of an OpenAI-compatible server (backend=openai)"
    )
    embedding_api_key: SecretStr | None = None
    embedding_dims: int | None = Field(
        default=None, description="expected dimensions; probed from the model when unset"
    )
    embedding_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="texts per forward pass; unset: 16 on the CPU (texts sorted by length "
        "pad least in small batches), measured on a GPU, 32 per request to a server",
    )
    embedding_streams: int = Field(
        default=1,
        ge=1,
        description="batches of one call embedded side by side on threads of their own, each "
        "with its share of the math threads (sentence-transformers with torch on the CPU; "
        "other backends embed one batch at a time; never more streams than math threads). "
        "Faster for ingestion: `es-rag worker` and inline `es-rag ingest` set it to their "
        "math threads (at most 8) when unset; a serving process keeps 1, so that one query "
        "gets every thread",
    )
    embedding_max_length: int = 512
    embedding_normalize: bool = True
    query_prefix: str = Field(default="", description="text prepended to queries (e.g. 'query: ')")
    passage_prefix: str = Field(default="", description="text prepended to passages")
    embedding_input_type: bool = Field(
        default=True,
        description="send input_type=query|passage to the OpenAI-compatible server",
    )
    embedding_timeout: float = 60.0
    embedding_max_retries: int = 5
    device: str | None = Field(default=None, description="torch device: cpu, cuda, cuda:1, mps")
    embedding_runtime: EmbeddingRuntime = Field(
        default="torch",
        description="how the sentence-transformers model runs: torch, onnx (ONNX Runtime, "
        "fp32, CPU) or onnx-int8 (dynamically quantised int8, CPU); onnx needs "
        "`pip install 'es-rag[onnx]'`. Vectors differ slightly, so it is part of the "
        "embedding version (an index is re-embedded to change it: es-rag migrate)",
    )
    embedding_onnx_cache: Path | None = Field(
        default=None,
        description="folder where the ONNX exports of the model are made once and kept "
        "(default: $XDG_CACHE_HOME or ~/.cache, then es-rag/onnx)",
    )

    # --- index --------------------------------------------------------------------------
    similarity: Similarity = "cosine"
    vector_index_type: str = Field(
        default="int8_hnsw", description="hnsw, int8_hnsw, int4_hnsw, bbq_hnsw, flat, ..."
    )
    opensearch_knn_engine: OpenSearchKnnEngine = Field(
        default="lucene",
        description="OpenSearch k-NN engine; faiss/nmslib need the plugin's native libraries",
    )
    opensearch_native_knn: bool = Field(
        default=False,
        description="vouch that every OpenSearch data node has the k-NN plugin's native "
        "libraries (faiss/nmslib); es-rag cannot check it and refuses those engines otherwise",
    )
    opensearch_search_pipeline: str = Field(
        default="es-rag-rrf",
        description="search pipeline es-rag creates for opensearch-hybrid (RRF)",
    )
    hnsw_m: int = 16
    hnsw_ef_construction: int = 100
    number_of_shards: int = 1
    number_of_replicas: int = 0
    analyzer_language: str = Field(
        default="english", description="Snowball stemmer for Latin-script text"
    )
    principal_case_sensitive: bool = Field(
        default=False,
        description="keep the case of principal and tenant names (default: case-insensitive, "
        "Unicode case folding); recorded in the index contract",
    )

    # --- parsing (files, in a sandboxed child process) ---------------------------------------
    parse_max_mb: int = Field(default=200, description="largest input file, MB")
    parse_max_text_mb: int = Field(
        default=20, description="largest text-format file (txt, md, html, csv, eml), MB"
    )
    parse_inline_max_kb: int = Field(
        default=1024,
        description="Markdown up to this size is read in the worker itself, without a "
        "sandboxed child (es-rag's own linear-time reader); larger files go to the sandbox",
    )
    parse_shared_server: bool = Field(
        default=True,
        description="a worker with several processes (prefork) runs one parse server for "
        "all of them instead of one each (about 1 GB of parsers held once)",
    )
    parse_max_unzipped_mb: int = Field(
        default=1024, description="largest inflated size of a DOCX/PPTX/XLSX (zip bombs), MB"
    )
    mail_attachments: bool = Field(
        default=True,
        description="read an e-mail's (EML, MSG) attachments after its body, each under a "
        "heading with its name, by the parser of its own type and within the same parse's "
        "limits; an attached mail's own attachments are named, not read. false: bodies only",
    )
    parse_memory_mb: int = Field(
        default=2048, description="address space a parse may add to the parse server's, MB"
    )
    parse_cpu_seconds: int = Field(default=300, description="CPU seconds one parse may use")
    parse_timeout: float = Field(
        default=300.0,
        description="wall-clock seconds for one parse; keep it under task_soft_time_limit, or "
        "a queued parse is reported as a task timeout instead",
    )
    pdf_strategy: Literal["auto", "fast", "ocr_only"] = Field(
        default="auto",
        description="auto: the text layer (Unstructured fast), OCR when there is none; "
        "fast: never OCR; ocr_only: always OCR",
    )
    ocr: bool = Field(default=True, description="OCR scans and images with Tesseract")
    ocr_languages: str = Field(
        default="",
        description="Tesseract languages joined by '+', e.g. eng+chi_sim; empty: whichever of "
        "eng, chi_sim, chi_tra are installed",
    )
    ocr_dpi: int = Field(
        default=300,
        description="resolution a PDF page is rendered at for OCR when it holds no scanned image "
        "(a scan is read at its own resolution, within 150-600 dpi)",
    )

    # --- chunking ------------------------------------------------------------------------
    chunk_size: int = Field(
        default=256, description="target child chunk size in embedding-model tokens"
    )
    chunk_overlap: int = Field(
        default=40, description="tokens shared by consecutive chunks (about 15%)"
    )
    context_header_prefix: bool = Field(
        default=True, description="prefix each chunk's BM25 terms and embedding with its title path"
    )
    parent_chunk_size: int = Field(
        default=1024, description="parent (section) chunk cap in tokens; context, not searched"
    )

    # --- ingest ---------------------------------------------------------------------------
    walk_exclude: str = Field(
        default="",
        description="comma-separated patterns in .gitignore's syntax (*.log, drafts/, "
        "/build/) that folder walks leave out, besides the built-in ones; a file named "
        "itself is read whatever its name",
    )
    walk_default_excludes: bool = Field(
        default=True,
        description="folder walks leave out files that are never documents by their names: "
        "a site's styles, scripts, fonts, icons and search indexes, archives, compiled code "
        "(es_rag.files.DEFAULT_EXCLUDES); false: walks offer every file to the parser",
    )
    bulk_chunk_size: int = 256
    bulk_max_retries: int = 5
    bulk_initial_backoff: float = 1.0

    # --- search ---------------------------------------------------------------------------
    strategy: StrategyName = "auto"
    k: int = 10
    fusion: Literal["rrf", "linear", "zscore"] = Field(
        default="zscore",
        description="what `auto` fuses with: zscore (z-score combination, BM25's scores as "
        "log(1 + score), the best across the seven dev collections) or linear (min-max "
        "combination), both client-side over one _msearch; or rrf (native where the cluster "
        "has it); see README for the evidence",
    )
    rank_constant: int = 60
    rank_window_size: int = 50
    num_candidates: int = 100
    bm25_weight: float = 1.0
    knn_weight: float = 1.0
    content_boost: float = 1.0
    title_boost: float = 0.5
    highlight: bool = Field(default=True, description="highlight query words in hit content")
    search_type: Literal["query_then_fetch", "dfs_query_then_fetch"] = Field(
        default="query_then_fetch",
        description="dfs_query_then_fetch gathers BM25 term statistics from every shard "
        "first (one more round trip): same BM25 scores on 1 or N shards",
    )
    query_cache_size: int = Field(default=1024, description="LRU of query embeddings; 0 = off")
    feedback_chunks: int = Field(
        default=3,
        ge=0,
        description="pseudo-relevance feedback for the fused strategies: the BM25 question is "
        "expanded with terms of the top N fused chunks (weighted by how far BM25 and kNN "
        "agree on the top 10), searched again and fused again with the same kNN list; 0 = off",
    )
    feedback_terms: int = Field(default=10, ge=1, description="expansion terms (feedback)")
    feedback_weight: float = Field(
        default=0.6, ge=0.0, description="boost of the strongest expansion term (feedback)"
    )
    question_sentences: int = Field(
        default=4,
        ge=0,
        description="client-side fusion: a question of two or more sentences also asks up to N "
        "of them as kNN searches of their own, each chunk at its best similarity (0: off)",
    )

    # --- context (prompt-ready evidence) ------------------------------------------------------
    context_candidates: int = Field(default=10, description="hits considered for the context")
    context_expand: Literal["parent", "neighbours", "none"] = "parent"
    context_neighbours: int = Field(default=1, description="siblings each side (neighbours)")
    context_budget_tokens: int = Field(default=3000, description="evidence budget in tokens")
    context_tokenizer: str | None = Field(
        default=None,
        description="tokenizer (name or path) that counts the budget; default: the local "
        "embedding model's, else a word-based estimate",
    )
    context_max_per_doc: int = Field(default=3, description="items per document (diversity)")
    sufficiency: Literal["auto", "off"] = Field(
        default="auto",
        description="auto: refuse weak evidence with the index's own calibration (stored "
        "in its _meta); off: never refuse (unless min_knn_score / min_rerank_score say so)",
    )
    sufficiency_strictness: float = Field(
        default=1.1,
        description="where the dense threshold sits between the median (0) and the 90th "
        "percentile (1) of the index's unanswerable probes; higher refuses more",
    )
    sufficiency_min_coverage: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="refuse when the best evidence holds less than this share of the "
        "question's terms, weighted by rarity",
    )
    min_knn_score: float | None = Field(
        default=None,
        description="a fixed best dense similarity (the server's _score) below which "
        "evidence is insufficient, instead of the calibrated one",
    )
    min_rerank_score: float | None = Field(
        default=None, description="same, on the reranker's score when reranked"
    )

    # --- rerank ---------------------------------------------------------------------------
    rerank_model: str | None = Field(
        default=None,
        description="cross-encoder name or local path (production: BAAI/bge-reranker-v2-m3); "
        "unset = no reranking",
    )
    rerank_backend: RerankBackend = "flag"
    rerank_window: int = Field(default=50, description="top candidates the reranker sees")
    rerank_k: int | None = Field(
        default=None, description="hits kept after reranking; unset = the search k"
    )
    rerank_batch_size: int = 16
    rerank_max_length: int = Field(default=512, description="tokens of query + passage")
    rerank_timeout: float = Field(default=10.0, description="seconds budget for one rerank")
    rerank_fp16: bool = Field(default=True, description="half precision; applied on cuda only")

    # --- the service (es-rag serve) -------------------------------------------------------------
    keys_index: str = Field(
        default="es-rag-keys", description="where API keys are kept (hashed), beside the chunks"
    )
    keys_cache_seconds: float = Field(
        default=2.0, description="how long a serving process trusts a key it read (revocation)"
    )
    serve_max_body_bytes: int = Field(default=1 << 20, description="largest request body")
    serve_max_query_chars: int = Field(default=2000, description="longest question")
    serve_max_k: int = Field(default=100, description="largest k a request may ask for")
    serve_max_budget_tokens: int = Field(default=20000, description="largest context budget")
    serve_request_timeout: float = Field(default=30.0, description="seconds per request")
    serve_rate_limit: float = Field(
        default=50.0, description="requests per second per key (a key may carry its own)"
    )
    serve_batch_size: int = Field(default=32, description="query embeddings encoded together")
    serve_batch_wait_ms: float = Field(
        default=5.0,
        description="how long a query waits for searches on their way to share its encode "
        "(never when none is)",
    )
    serve_max_pending: int = Field(
        default=256, description="queries waiting for an embedding before the service says 503"
    )
    serve_log_text: bool = Field(
        default=False, description="debug only: put questions in the access log"
    )
    serve_ingest_roots: str = Field(
        default="",
        description="comma-separated folders POST /v1/documents may name files under; empty: "
        "ingestion by path through the API is off",
    )
    serve_cors_origins: str = Field(
        default="",
        description="comma-separated browser origins (https://app.example.com) allowed to call "
        "the service from another origin; empty: none. A request from any other origin is "
        "refused (403) before its credential is read",
    )
    jwt_secret: SecretStr | None = Field(default=None, description="HS256 shared secret")
    jwt_jwks_file: Path | None = Field(default=None, description="JWKS file (RS256/ES256 keys)")
    jwt_issuer: str | None = None
    jwt_audience: str | None = None
    jwt_tenant_claim: str = "tenant"
    jwt_principals_claim: str = "principals"
    jwt_user_claim: str | None = Field(
        default="sub", description="claim naming the user (becomes user:<value>); empty: none"
    )
    jwt_role_claim: str = "role"

    @property
    def cors_origins(self) -> list[str]:
        return [o.strip().rstrip("/") for o in self.serve_cors_origins.split(",") if o.strip()]

    @property
    def walk_exclude_patterns(self) -> list[str]:
        return [p.strip() for p in self.walk_exclude.split(",") if p.strip()]

    @property
    def ingest_roots(self) -> list[Path]:
        return [Path(p.strip()) for p in self.serve_ingest_roots.split(",") if p.strip()]

    @property
    def es_urls(self) -> list[str]:
        """The node URLs ``es_url`` lists (comma-separated)."""
        return [u.strip() for u in self.es_url.split(",") if u.strip()]

    @property
    def queues(self) -> list[str]:
        """Every queue es-rag's tasks use (one, or the parse and embed queues when split)."""
        return sorted({self.queue, self.parse_queue or self.queue, self.embed_queue or self.queue})

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.embedding_backend == "openai" and not self.embedding_url:
            raise ValueError(
                "ES_RAG_EMBEDDING_URL is required when ES_RAG_EMBEDDING_BACKEND=openai"
            )
        if self.embedding_runtime != "torch" and self.embedding_backend != "sentence-transformers":
            raise ValueError(
                f"ES_RAG_EMBEDDING_RUNTIME={self.embedding_runtime} applies to the "
                "sentence-transformers backend only, not "
                f"ES_RAG_EMBEDDING_BACKEND={self.embedding_backend}"
            )
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError("chunk_overlap must be smaller than chunk_size")
        if self.rank_window_size < 1 or self.rank_constant < 1:
            raise ValueError("rank_window_size and rank_constant must be >= 1")
        if self.task_time_limit <= self.task_soft_time_limit:
            raise ValueError("task_time_limit must be above task_soft_time_limit")
        if self.worker_lease_seconds < 3:
            raise ValueError("worker_lease_seconds must be >= 3")
        if self.visibility_timeout is not None and self.visibility_timeout <= self.task_time_limit:
            # A slow but healthy task would be handed to a second worker while it runs.
            raise ValueError("visibility_timeout must be above task_time_limit")
        if self.num_candidates < self.rank_window_size:
            # kNN cannot return more than num_candidates; keep the window honest.
            self.num_candidates = self.rank_window_size
        return self
