"""es-rag's exceptions, one module, one hierarchy.

    EsRagError
    ├── TransientError              a fault that may pass (the queue retries it); a mixin below
    ├── ConfigurationError          settings that cannot work together
    ├── AccessControlError          a document without a valid ACL, a malformed principal
    │   └── TenantMismatchError     an operation that would move a document between tenants
    ├── IndexContractError          the index's _meta disagrees with the configuration
    │   └── DimensionMismatchError  vectors of the wrong size for the index
    ├── AnalyzerMismatchError       query-time analyzer differs from the index's
    ├── AclGuardError               a search body without the caller's ACL (a bug, never sent)
    ├── EngineError                 the search server refused or failed a request
    │   ├── EngineUnavailableError  unreachable, timed out, 429 or 5xx          (transient)
    │   ├── BulkIndexingError       some chunks of a bulk request failed (details per chunk)
    │   │   └── BulkRejectedError   every failure was a rejection (429/503)     (transient)
    │   ├── IndexBlockedError        the index refuses writes (read-only / flood stage)
    │   └── StrategyUnavailableError  a forced strategy the cluster cannot run
    ├── EmbeddingError              the embedding model or server failed
    │   └── EmbeddingUnavailableError  refused, timed out, 429 or 5xx           (transient)
    ├── QueueUnavailableError       the broker (Redis) cannot be reached         (transient)
    ├── RerankError                 the reranker failed or ran out of time
    ├── FilterError                 a user filter that cannot be translated honestly
    ├── DashboardsError             Kibana / OpenSearch Dashboards refused or failed an import
    └── InputError                  an input document that cannot be ingested
        ├── UnsupportedFormatError  a file type es-rag does not parse (judged by content)
        ├── EncryptedDocumentError  a password-protected file; es-rag never guesses passwords
        ├── CorruptDocumentError    truncated or malformed bytes, or a parser that crashed on them
        ├── EmptyDocumentError      nothing to index (``needs_ocr``: a scan and no OCR)
        ├── DocumentTooLargeError   over the input-size or decompressed-size limit
        └── ParseLimitError         a parse hit a limit: memory, CPU, wall clock, nesting depth

"Transient" is a type, decided where the fault happens (the HTTP client, the search
client, the broker), never by reading a message: ``isinstance(exc, TransientError)`` is
the whole rule the queue applies. Everything else is permanent and fails once.

Every exception with extra fields defines ``__reduce__`` so that it survives pickling
(Celery carries exceptions between processes).
"""

from __future__ import annotations

from typing import Any


class EsRagError(Exception):
    """Base class of every error es-rag raises on purpose."""


class TransientError(EsRagError):
    """A fault that may pass on its own (a server down or busy): worth a later retry."""


class ConfigurationError(EsRagError):
    """Settings that cannot work together."""


class AccessControlError(EsRagError):
    """A document without a valid ACL, or a malformed principal."""


class TenantMismatchError(AccessControlError):
    """An operation that would move a document from one tenant to another."""


class IndexContractError(EsRagError):
    """The index's recorded contract (_meta) disagrees with the configuration."""


class DimensionMismatchError(IndexContractError):
    """Vectors whose size differs from the index's dense_vector dimensions."""

    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"embedding has {got} dimensions, the index expects {expected}")
        self.expected = expected
        self.got = got

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.expected, self.got))


class AnalyzerMismatchError(EsRagError):
    """The query-time analyzer differs from the one the index was built with."""


class AclGuardError(EsRagError):
    """A search body lacked the caller's ACL in some retriever; it was not sent."""


class EngineError(EsRagError):
    """The search server refused or failed a request."""


class EngineUnavailableError(EngineError, TransientError):
    """The search server cannot be reached, timed out, or is busy (429/5xx)."""


class BulkIndexingError(EngineError):
    """Some chunks of a bulk write failed; ``failures`` names each one and why."""

    def __init__(self, message: str, failures: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.failures = failures

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.args[0], self.failures))


class BulkRejectedError(BulkIndexingError, TransientError):
    """Every failed chunk was rejected for load (429/503) after the client's own retries."""


class IndexBlockedError(EngineError):
    """The index refuses writes (e.g. the flood-stage read-only block); retrying won't help."""


class StrategyUnavailableError(EngineError):
    """A retrieval strategy was forced that this cluster cannot run."""


class EmbeddingError(EsRagError):
    """The embedding model or embedding server failed."""


class EmbeddingUnavailableError(EmbeddingError, TransientError):
    """The embedding server refused connections, timed out or answered 429/5xx throughout."""


class QueueUnavailableError(TransientError):
    """The broker (Redis) cannot be reached; nothing was sent."""


class RerankError(EsRagError):
    """The reranker failed or ran out of time."""


class FilterError(EsRagError):
    """A user's search filter that is malformed or would silently match the wrong rows."""


class DashboardsError(EsRagError):
    """Kibana or OpenSearch Dashboards could not be reached, refused the saved objects, or
    imported only some of them (``es-rag dashboards install``)."""


class InputError(EsRagError):
    """An input document that cannot be ingested."""


class UnsupportedFormatError(InputError):
    """A file type es-rag does not parse (judged by content, not by the extension)."""


class EncryptedDocumentError(InputError):
    """A password-protected file; es-rag never guesses passwords."""


class CorruptDocumentError(InputError):
    """Truncated or malformed bytes, or a parser that crashed on them."""


class EmptyDocumentError(InputError):
    """A file with nothing to index; ``needs_ocr`` says it is a scan and OCR is off."""

    def __init__(self, message: str, *, needs_ocr: bool = False) -> None:
        super().__init__(message)
        self.needs_ocr = needs_ocr

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, {"needs_ocr": self.needs_ocr}))


class NoTextError(EmptyDocumentError):
    """An image in which OCR found no words (a photo, a drawing, an icon): nothing to
    index, and nothing wrong with the file. Recorded as skipped (reason ``no-text``), not
    as a failure: a folder of pictures is not a run that failed."""


class DocumentTooLargeError(InputError):
    """A file over the input-size limit, or an archive over the decompressed-size limit."""


class ParseLimitError(InputError):
    """A parse hit a limit (``limit``: memory, cpu, wall or depth) and was stopped."""

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.args, {"limit": self.limit}))


def _rebuild(cls: type[Exception], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Exception:
    """Unpickle an error whose extra fields are keyword-only."""
    return cls(*args, **kwargs)
