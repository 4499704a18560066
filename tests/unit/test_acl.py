from __future__ import annotations

import pytest

from es_rag.acl import make_acl, make_caller, normalize_principal
from es_rag.errors import AccessControlError

pytestmark = pytest.mark.unit


def test_principals_are_normalised() -> None:
    caller = make_caller("acme", users=["u1", "user:u2"], groups=["support"], roles=["admin"])
    assert caller.principals == {"user:u1", "user:u2", "group:support", "role:admin"}
    assert normalize_principal("group:payment-rd") == "group:payment-rd"


@pytest.mark.parametrize("bad", ["", "  ", "user:", "User:x", "group:has space"])
def test_malformed_principals_are_rejected(bad: str) -> None:
    with pytest.raises(AccessControlError):
        normalize_principal(bad)


def test_document_without_acl_is_rejected() -> None:
    with pytest.raises(AccessControlError, match="no ACL"):
        make_acl("acme")
    with pytest.raises(AccessControlError, match="no ACL"):
        make_acl("acme", deny=["user:x"])  # a deny list alone grants nobody


def test_public_and_restricted_acl() -> None:
    assert make_acl("acme", public=True).visibility == "public"
    acl = make_acl("acme", allow=["group:b", "group:a", "group:a"], deny=["mallory"])
    assert acl.visibility == "restricted"
    assert acl.allowed_principals == ("group:a", "group:b")
    assert acl.denied_principals == ("user:mallory",)


def test_tenant_is_required() -> None:
    with pytest.raises(AccessControlError):
        make_acl(" ", public=True)
    with pytest.raises(AccessControlError):
        make_caller("")


def test_public_api_is_exported_lazily() -> None:
    import es_rag

    assert set(es_rag.__all__) - {"__version__"} == set(es_rag._EXPORTS)
    for name in es_rag._EXPORTS:
        assert getattr(es_rag, name) is not None
