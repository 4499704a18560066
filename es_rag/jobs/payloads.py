"""Queue payloads: what travels through Redis, as JSON, typed on both ends.

Payloads carry paths or ``file://`` URIs the workers can read, never file bytes; a parsed
document crosses from the parse queue to the embed queue as itself (``DocumentPayload``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from es_rag.acl import make_acl, normalize_tenant
from es_rag.errors import EsRagError
from es_rag.types import AccessControl, Document

if TYPE_CHECKING:
    from es_rag.pipeline import Ingestor

INGEST_TASK = "es_rag.ingest"
BATCH_TASK = "es_rag.ingest_batch"


class AclPayload(BaseModel):
    tenant: str
    public: bool = False
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)

    def acl(self, *, case_sensitive: bool = False) -> AccessControl:
        return make_acl(
            self.tenant,
            allow=self.allow,
            deny=self.deny,
            public=self.public,
            case_sensitive=case_sensitive,
        )


class IngestPayload(AclPayload):
    """One document to ingest: a path (or file:// URI) the worker can read, never bytes."""

    path: str
    doc_id: str | None = None
    doc_version: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def file(self) -> Path:
        return Path(self.path.removeprefix("file://"))

    @property
    def key(self) -> str:
        """The document id (the tenant is the other half of a document's identity)."""
        return self.doc_id or self.path


class DocumentPayload(BaseModel):
    """A parsed document on its way from the parse queue to the embed queue (JSON).

    The ``Document`` dataclass itself, validated by pydantic field by field on arrival
    (its ACL validates itself again), so the two can never drift apart.
    """

    document: Document
    parse_ms: float = 0.0


def tenant_of(ingestor: Ingestor, payload: AclPayload) -> str:
    """The tenant as rows store it; a malformed one is kept as given so that its failure
    can still be recorded (the ACL check reports what is wrong with it)."""
    try:
        return normalize_tenant(
            payload.tenant, case_sensitive=ingestor.settings.principal_case_sensitive
        )
    except EsRagError:
        return payload.tenant
