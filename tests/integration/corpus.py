"""A small, hand-written corpus for the search tests (documents, ACLs, canaries)."""

from __future__ import annotations

from es_rag.acl import make_acl
from es_rag.types import AccessControl, Document

TENANT = "acme"

PUBLIC_DOCS = {
    "lunch": (
        "Cafeteria",
        "The cafeteria serves hot food from noon until two o'clock. Vegetarian dishes are "
        "available every day, and the salad bar opens at half past eleven.",
    ),
    "refund-errors": (
        "Refund error codes",
        "If the payment processor rejects a reversal, the ledger service records code "
        "ERR_REFUND_1042 and schedules a retry for the next settlement window.",
    ),
    "refund-timing": (
        "Refund timing",
        "Refunds are credited to the original card within five working days after approval.",
    ),
    "vpn": (
        "Remote access",
        "Employees connect to the corporate network through the VPN client. Multi-factor "
        "authentication with a hardware token is mandatory.",
    ),
    "parking": (
        "Parking",
        "The garage under building B has two hundred spaces. Electric vehicle chargers are on "
        "level minus one.",
    ),
    "payroll": (
        "Payroll calendar",
        "Salaries are paid on the last business day of each month. Expense claims submitted "
        "before the twentieth are reimbursed with the same payroll run. Bonuses appear as a "
        "separate line on the payslip, and pension contributions are deducted before tax. "
        "Questions go to the human resources service desk. Internal reference ZK4471QX.",
    ),
    "incident": (
        "Incident response",
        "When a production outage happens, the on-call engineer opens an incident channel, "
        "pages the service owner and posts status updates every thirty minutes.",
    ),
    "travel": (
        "Travel policy",
        "Business trips need manager approval. Economy class is booked for flights shorter "
        "than six hours; hotels are reserved through the travel portal.",
    ),
    "errors-overview": (
        "Error handling overview",
        "Every service reports failures with structured error codes, a severity level and a "
        "correlation identifier so that support staff can trace problems across systems.",
    ),
    "payments-api": (
        "Payments API",
        "The payments API accepts card and bank transfer payments. Failed charges return an "
        "error object with a machine-readable code and a human-readable message.",
    ),
}

# Canaries: restricted text that must never reach a caller outside the allow list, or a
# caller on the deny list, whatever the strategy, k or query.
CANARY_FINANCE = (
    "CANARY-7781 confidential: the acquisition of Initech closes on the fourteenth of March "
    "for four hundred million."
)
CANARY_DENIED = (
    "CANARY-5523 support-only: the escalation hotline for platinum customers is extension 4410."
)
CANARY_OTHER_TENANT = "CANARY-9090 globex: the reactor maintenance window starts at midnight."

PARAPHRASE_QUERY = "When can I get a midday meal?"  # shares no word with the lunch document
PARAPHRASE_ANSWER = "lunch"
# An opaque identifier: lexical search must find it, a dense model cannot "understand" it.
IDENTIFIER_QUERY = "ZK4471QX"
IDENTIFIER_ANSWER = "payroll"


def public_acl() -> AccessControl:
    return make_acl(TENANT, public=True)


def documents() -> list[Document]:
    docs = [
        Document(doc_id=doc_id, title=title, text=text, acl=public_acl())
        for doc_id, (title, text) in PUBLIC_DOCS.items()
    ]
    docs.append(
        Document(
            doc_id="canary-finance",
            title="Board minutes",
            text=CANARY_FINANCE,
            acl=make_acl(TENANT, allow=["group:finance"]),
        )
    )
    docs.append(
        Document(
            doc_id="canary-denied",
            title="Escalations",
            text=CANARY_DENIED,
            acl=make_acl(TENANT, allow=["group:support"], deny=["user:mallory"]),
        )
    )
    docs.append(
        Document(
            doc_id="canary-globex",
            title="Reactor",
            text=CANARY_OTHER_TENANT,
            acl=make_acl("globex", public=True),
        )
    )
    return docs
