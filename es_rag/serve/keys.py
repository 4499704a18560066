"""API keys in the style of Elasticsearch's: ``Authorization: ApiKey base64(id:key)``.

A key is a random id and a random secret. Only ``sha256(id:secret)`` is stored, in the
keys index (``ES_RAG_KEYS_INDEX``, mapping ``mappings/keys-v1.json``), with what the key
stands for: a tenant, its principals, a role (``search``, ``ingest``, ``admin``), the
aliases it may use, an optional expiry and rate limit. The secret is shown once, at
creation.

A serving process trusts a key it read for ``ES_RAG_KEYS_CACHE_SECONDS`` (2 s): a
revocation reaches every process within that, without a request to the search server
for every call. Unknown ids are remembered as unknown for as long.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from es_rag.acl import normalize_principal, normalize_tenant
from es_rag.engine.base import Engine
from es_rag.engine.mapping import index_body
from es_rag.errors import AccessControlError, ConfigurationError

ROLES = ("search", "ingest", "admin")
KEYS_MAPPING = "keys-v1.json"
_DURATION = re.compile(r"^(\d+)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class ApiKey:
    """What a key stands for (never its secret)."""

    key_id: str
    name: str
    tenant: str
    principals: tuple[str, ...]
    role: str
    aliases: tuple[str, ...] = ()
    rate_limit: float | None = None
    created_at: str = ""
    expires_at: str | None = None
    revoked_at: str | None = None

    def usable(self, now: datetime) -> str | None:
        """Why this key cannot be used now, or None."""
        if self.revoked_at:
            return "the key was revoked"
        if self.expires_at and datetime.fromisoformat(self.expires_at) <= now:
            return "the key has expired"
        return None

    def to_public(self) -> dict[str, Any]:
        return {
            "id": self.key_id,
            "name": self.name,
            "tenant": self.tenant,
            "principals": list(self.principals),
            "role": self.role,
            "aliases": list(self.aliases),
            "rate_limit": self.rate_limit,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "revoked_at": self.revoked_at,
        }


@dataclass(frozen=True)
class NewKey:
    """A key just made: its record, and the secret shown this once."""

    key: ApiKey
    secret: str

    @property
    def encoded(self) -> str:
        """What goes after ``ApiKey `` (or ``Bearer ``) in the Authorization header."""
        return base64.b64encode(f"{self.key.key_id}:{self.secret}".encode()).decode()


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``15m``, ``90s``."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ConfigurationError(f"a duration looks like 30d, 12h, 15m or 90s (got {text!r})")
    return timedelta(seconds=int(match.group(1)) * _SECONDS[match.group(2)])


def decode(credential: str) -> tuple[str, str] | None:
    """(id, secret) of an encoded key, or None when it is not one."""
    try:
        raw = base64.b64decode(credential.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    key_id, sep, secret = raw.partition(":")
    return (key_id, secret) if sep and key_id and secret else None


def new_key_id() -> str:
    """A random id that never begins with "-": one in 64 of ``token_urlsafe``'s did, and
    ``es-rag keys revoke -8CR…`` reads such an id as an option."""
    while (key_id := secrets.token_urlsafe(15)).startswith("-"):
        pass
    return key_id


def _digest(key_id: str, secret: str) -> str:
    return hashlib.sha256(f"{key_id}:{secret}".encode()).hexdigest()


@dataclass
class KeyStore:
    """The keys index. Construction does no I/O."""

    engine: Engine
    index: str
    cache_seconds: float = 2.0
    case_sensitive: bool = False
    _cache: dict[str, tuple[float, dict[str, Any] | None]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ready: bool = False

    def ensure(self) -> None:
        if not self._ready:
            self.engine.ensure_index(self.index, index_body(KEYS_MAPPING))
            self._ready = True

    def create(
        self,
        *,
        tenant: str,
        principals: list[str],
        role: str = "search",
        aliases: list[str] | None = None,
        name: str = "",
        expires_in: timedelta | None = None,
        rate_limit: float | None = None,
    ) -> NewKey:
        if role not in ROLES:
            raise ConfigurationError(f"role must be one of {ROLES}, not {role!r}")
        if rate_limit is not None and rate_limit <= 0:
            raise ConfigurationError("a rate limit is a positive number of requests per second")
        cs = self.case_sensitive
        now = datetime.now(timezone.utc)
        key = ApiKey(
            key_id=new_key_id(),
            name=name,
            tenant=normalize_tenant(tenant, case_sensitive=cs),
            principals=tuple(
                sorted({normalize_principal(p, case_sensitive=cs) for p in principals})
            ),
            role=role,
            aliases=tuple(aliases or ()),
            rate_limit=rate_limit,
            created_at=now.isoformat(),
            expires_at=(now + expires_in).isoformat() if expires_in else None,
        )
        secret = secrets.token_urlsafe(32)
        self.ensure()
        row = {
            "key_id": key.key_id,
            "name": key.name,
            "hash": _digest(key.key_id, secret),
            "tenant_id": key.tenant,
            "principals": list(key.principals),
            "role": key.role,
            "aliases": list(key.aliases),
            "rate_limit": key.rate_limit,
            "created_at": key.created_at,
            "expires_at": key.expires_at,
        }
        self.engine.put(
            self.index, key.key_id, {k: v for k, v in row.items() if v is not None}, refresh=True
        )
        return NewKey(key=key, secret=secret)

    def revoke(self, key_id: str) -> bool:
        self.ensure()
        row = self.engine.get(self.index, key_id)
        if row is None:
            return False
        row.pop("_version", None)
        row["revoked_at"] = datetime.now(timezone.utc).isoformat()
        self.engine.put(self.index, key_id, row, refresh=True)
        with self._lock:
            self._cache.pop(key_id, None)
        return True

    def list(self) -> list[ApiKey]:
        self.ensure()
        self.engine.refresh(self.index)
        rows = self.engine.scan(self.index, {"query": {"match_all": {}}})
        return sorted((_record(h["_source"]) for h in rows), key=lambda k: k.created_at)

    def cached(self, credential: str) -> bool:
        """Whether ``verify`` can answer from memory (no request to the search server)."""
        decoded = decode(credential)
        if decoded is None:
            return True  # refused without I/O
        with self._lock:
            hit = self._cache.get(decoded[0])
        return hit is not None and time.monotonic() - hit[0] < self.cache_seconds

    def verify(self, credential: str) -> ApiKey:
        """The key an encoded credential names, if the secret matches; else raises."""
        decoded = decode(credential)
        if decoded is None:
            raise AccessControlError("not an API key")
        key_id, secret = decoded
        row = self._row(key_id)
        if row is None or not hmac.compare_digest(
            str(row.get("hash", "")), _digest(key_id, secret)
        ):
            raise AccessControlError("unknown API key")
        return _record(row)

    def _row(self, key_id: str) -> dict[str, Any] | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(key_id)
        if cached is not None and now - cached[0] < self.cache_seconds:
            return cached[1]
        self.ensure()
        row = self.engine.get(self.index, key_id)
        with self._lock:
            self._cache[key_id] = (now, row)
            if len(self._cache) > 10_000:  # unknown ids must not grow this without bound
                self._cache.clear()
        return row


def _record(row: dict[str, Any]) -> ApiKey:
    return ApiKey(
        key_id=row["key_id"],
        name=row.get("name", ""),
        tenant=row["tenant_id"],
        principals=tuple(row.get("principals") or ()),
        role=row.get("role", "search"),
        aliases=tuple(row.get("aliases") or ()),
        rate_limit=row.get("rate_limit"),
        created_at=row.get("created_at", ""),
        expires_at=row.get("expires_at"),
        revoked_at=row.get("revoked_at"),
    )
