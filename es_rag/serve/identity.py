"""Who is calling: from an API key or a JWT, and from nothing else.

The tenant and the principals a search runs with come from the credential alone; the
request body, the query string and other headers are never read for them. A missing or
invalid credential is 401; a valid one used outside its role or aliases is 403.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from es_rag.acl import normalize_principal, normalize_tenant
from es_rag.config import Settings
from es_rag.errors import AccessControlError, EsRagError
from es_rag.serve.keys import ROLES, KeyStore
from es_rag.types import Caller

# What each role may do; admin may do everything.
ALLOWED = {
    "search": {"search"},
    "ingest": {"ingest", "status"},
    "admin": {"search", "ingest", "status"},
}


class Unauthorized(EsRagError):
    """No credential, or one that does not hold (401)."""


class Forbidden(EsRagError):
    """A valid credential used outside its role or aliases (403)."""


@dataclass(frozen=True)
class Identity:
    """An authenticated caller: who, for which tenant, allowed to do what."""

    subject: str  # the key id, or the token's subject: what logs and rate limits name
    kind: str  # "key" or "jwt"
    tenant: str
    principals: frozenset[str]
    role: str
    aliases: tuple[str, ...] = ()  # empty: any alias the service serves
    rate_limit: float | None = None

    @property
    def caller(self) -> Caller:
        return Caller(tenant=self.tenant, principals=self.principals)

    def require(self, action: str, alias: str | None) -> None:
        """``alias`` None: the caller checks the alias itself (es_rag.serve.es_api)."""
        if action not in ALLOWED.get(self.role, set()):
            raise Forbidden(f"a {self.role} credential may not {action}")
        if alias is not None and self.aliases and alias not in self.aliases:
            raise Forbidden(f"this credential may not use {alias!r}")


class Authenticator:
    """Turns an ``Authorization`` header into an ``Identity``."""

    def __init__(self, settings: Settings, keys: KeyStore) -> None:
        self.settings = settings
        self.keys = keys
        self._jwt_keys: Any = None

    @property
    def jwt_enabled(self) -> bool:
        return self.settings.jwt_secret is not None or self.settings.jwt_jwks_file is not None

    def needs_io(self, authorization: str | None) -> bool:
        """Whether ``identify`` may wait on the search server (a key not in the cache).

        Tokens and cached keys are checked on the event loop; the rest in a thread."""
        scheme, _, credential = (authorization or "").strip().partition(" ")
        credential = credential.strip()
        if scheme.lower() not in ("apikey", "bearer") or not credential:
            return False
        if scheme.lower() == "bearer" and credential.count(".") == 2:
            return False
        return not self.keys.cached(credential)

    def identify(self, authorization: str | None) -> Identity:
        if not authorization:
            raise Unauthorized("an Authorization header (ApiKey … or Bearer …) is required")
        scheme, _, credential = authorization.strip().partition(" ")
        scheme, credential = scheme.lower(), credential.strip()
        if not credential or scheme not in ("apikey", "bearer"):
            raise Unauthorized("Authorization must be 'ApiKey <key>' or 'Bearer <key or token>'")
        if scheme == "bearer" and credential.count(".") == 2:
            return self._from_jwt(credential)
        try:
            key = self.keys.verify(credential)
        except AccessControlError as exc:
            raise Unauthorized(str(exc)) from None
        why = key.usable(datetime.now(timezone.utc))
        if why:
            raise Unauthorized(why)
        return Identity(
            subject=key.key_id,
            kind="key",
            tenant=key.tenant,
            principals=frozenset(key.principals),
            role=key.role,
            aliases=key.aliases,
            rate_limit=key.rate_limit,
        )

    # --- JWT ------------------------------------------------------------------------------
    def _from_jwt(self, token: str) -> Identity:
        import jwt

        s = self.settings
        if not self.jwt_enabled:
            raise Unauthorized("bearer tokens are not accepted here (no JWT key configured)")
        try:
            header = jwt.get_unverified_header(token)
            key, algorithms = self._verification_key(header)
            claims = jwt.decode(
                token,
                key=key,
                algorithms=algorithms,
                audience=s.jwt_audience,
                issuer=s.jwt_issuer,
                options={"require": ["exp"], "verify_aud": s.jwt_audience is not None},
            )
        except jwt.PyJWTError as exc:
            raise Unauthorized(f"invalid token: {exc}") from None
        return self._identity_of(claims)

    def _verification_key(self, header: dict[str, Any]) -> tuple[Any, list[str]]:
        import jwt

        s = self.settings
        alg = header.get("alg")
        if alg == "HS256" and s.jwt_secret is not None:
            return s.jwt_secret.get_secret_value(), ["HS256"]
        if alg in ("RS256", "ES256") and s.jwt_jwks_file is not None:
            if self._jwt_keys is None:
                data = json.loads(s.jwt_jwks_file.read_text(encoding="utf-8"))
                self._jwt_keys = jwt.PyJWKSet.from_dict(data)
            kid = header.get("kid")
            for jwk in self._jwt_keys.keys:
                if kid is None or jwk.key_id == kid:
                    return jwk.key, [alg]
            raise jwt.InvalidKeyError(f"no key {kid!r} in the JWKS file")
        raise jwt.InvalidAlgorithmError(f"algorithm {alg!r} is not accepted here")

    def _identity_of(self, claims: dict[str, Any]) -> Identity:
        s = self.settings
        cs = s.principal_case_sensitive
        tenant = claims.get(s.jwt_tenant_claim)
        if not isinstance(tenant, str) or not tenant:
            raise Unauthorized(f"the token has no {s.jwt_tenant_claim!r} claim")
        raw = claims.get(s.jwt_principals_claim) or []
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list):
            raise Unauthorized(f"the {s.jwt_principals_claim!r} claim must be a list")
        names = [str(p) for p in raw]
        if s.jwt_user_claim and claims.get(s.jwt_user_claim):
            names.append(f"user:{claims[s.jwt_user_claim]}")
        role = claims.get(s.jwt_role_claim, "search")
        if role not in ROLES:
            raise Unauthorized(f"the token's role {role!r} is not one of {ROLES}")
        try:
            principals = frozenset(normalize_principal(p, case_sensitive=cs) for p in names)
            tenant = normalize_tenant(tenant, case_sensitive=cs)
        except AccessControlError as exc:
            raise Unauthorized(f"the token names a malformed identity: {exc}") from None
        return Identity(
            subject=str(claims.get("sub") or claims.get("jti") or "jwt"),
            kind="jwt",
            tenant=tenant,
            principals=principals,
            role=role,
        )
