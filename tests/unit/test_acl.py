from __future__ import annotations

import pytest

from es_rag.acl import (
    acl_filter,
    identity_policy,
    make_acl,
    make_caller,
    normalize_acl,
    normalize_caller,
    normalize_principal,
    normalize_tenant,
)
from es_rag.errors import AccessControlError
from es_rag.types import AccessControl, Caller

pytestmark = pytest.mark.unit


def test_principals_are_normalised() -> None:
    caller = make_caller("acme", users=["u1", "user:u2"], groups=["support"], roles=["admin"])
    assert caller.principals == {"user:u1", "user:u2", "group:support", "role:admin"}
    assert normalize_principal("group:payment-rd") == "group:payment-rd"


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "  ",
        "user:",
        "group:has space",
        "9user:x",
        "user:a\u200bb",
        "user:a\x00",
        "user:\u202ex",
    ],
)
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


def test_one_person_one_form_whatever_the_spelling() -> None:
    """Case, Unicode composition and the kind's case never make two people of one."""
    nfc, nfd = "user:Zoë", "user:Zoe\u0308"
    assert nfc != nfd
    assert normalize_principal(nfc) == normalize_principal(nfd) == "user:zoë"
    assert normalize_principal("USER:ALICE") == normalize_principal("user:alice") == "user:alice"
    assert normalize_principal("Group:Payments") == "group:payments"
    assert normalize_principal("Straße") == normalize_principal("STRASSE") == "user:strasse"
    # The policy that keeps case still composes Unicode and lower-cases the kind.
    assert normalize_principal("USER:Zoe\u0308", case_sensitive=True) == "user:Zoë"
    assert normalize_tenant(" Acme Corp ") == "acme corp"
    assert normalize_tenant("Acme", case_sensitive=True) == "Acme"


def test_deny_written_in_another_form_still_fires() -> None:
    acl = make_acl("Acme", allow=["group:Staff"], deny=["user:MALLORY"])
    caller = make_caller("acme", users=["mallory"], groups=["staff"])
    clause = acl_filter(caller)
    assert acl.tenant_id == caller.tenant == "acme"
    assert set(acl.denied_principals) <= caller.principals  # the deny matches this caller
    assert clause["bool"]["must_not"] == [
        {"terms": {"denied_principals": sorted(caller.principals)}}
    ]


@pytest.mark.parametrize(
    "bad",
    ["acme\u200b", "ac\x07me", "ac\u2028me", "a\tb", "a\u00a0b", "", "\u202eacme", "x" * 129],
)
def test_malformed_tenants_are_refused(bad: str) -> None:
    with pytest.raises(AccessControlError):
        normalize_tenant(bad)


def test_identity_lengths_are_capped() -> None:
    assert normalize_principal("user:" + "a" * 251) == "user:" + "a" * 251
    with pytest.raises(AccessControlError, match="limit is 256"):
        normalize_principal("user:" + "a" * 252)


def test_an_access_control_validates_itself() -> None:
    with pytest.raises(AccessControlError, match="no ACL"):
        AccessControl(tenant_id="acme", visibility="restricted")
    with pytest.raises(AccessControlError, match="visibility"):
        AccessControl(tenant_id="acme", visibility="secret")  # type: ignore[arg-type]
    with pytest.raises(AccessControlError):
        AccessControl(tenant_id="acme", visibility="public", denied_principals=("user:a\u200b",))
    with pytest.raises(AccessControlError):
        AccessControl(tenant_id=" ", visibility="public")
    acl = AccessControl(
        tenant_id="acme",
        visibility="restricted",
        allowed_principals=["group:b", "group:a"],  # type: ignore[arg-type]
    )
    assert acl.allowed_principals == ("group:a", "group:b")
    with pytest.raises(AccessControlError):
        Caller(tenant="", principals=frozenset({"user:a"}))
    with pytest.raises(AccessControlError):
        Caller(tenant="acme", principals="user:a")  # type: ignore[arg-type]


def test_normalising_is_idempotent_and_keeps_meaning() -> None:
    acl = AccessControl(
        tenant_id="Acme",
        visibility="restricted",
        allowed_principals=("user:Zoe\u0308", "group:A"),
        denied_principals=("USER:Bob",),
    )
    once = normalize_acl(acl)
    assert once == normalize_acl(once)
    assert once.tenant_id == "acme"
    assert once.allowed_principals == ("group:a", "user:zoë")
    assert once.denied_principals == ("user:bob",)
    caller = Caller(tenant="ACME", principals=frozenset({"User:Zoë"}))
    assert normalize_caller(caller) == Caller(tenant="acme", principals=frozenset({"user:zoë"}))
    assert identity_policy(False) == "nfc-casefold" and identity_policy(True) == "nfc"
