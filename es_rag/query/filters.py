"""User metadata filters: CLI expressions → ``FieldFilter`` → Elasticsearch filter clauses.

Pure, no server. The caller puts the clauses next to the ACL inside every retriever
(``build.retrieval_filters``), so a filter narrows the candidates before k is counted.

Syntax of one expression (``parse_filter``)::

    field=value          equality                  doc_id=handbook-7
    field=v1|v2|v3       any of a set              mime_type=application/pdf|text/html
    field>=v  field>v    range (numeric and date)  page_start>=10   updated_at>=now-30d
    field<=v  field<v
    field?               the field has a value     metadata.product?

Whitespace around the operator and around set members is ignored. The field ends at the
first ``=``, ``<`` or ``>``; everything after the operator is the value, so a value may
contain ``=`` (``metadata.query=a=b``) and spaces. ``||`` is never a set separator (it is
date math's anchor: ``updated_at>=2024-05-01||-1M``). Not expressible, on purpose: a
literal single ``|`` in an equality value, a value that starts with ``=``, ``<`` or ``>``
(``x=>5`` and ``x==5`` are typos far more often than intended), negation, and OR across
fields.

Decisions (each refusal is a ``FilterError`` that says why; no filter is dropped or
translated into something that quietly matches other rows than it says):

* Repeating a field is AND: ``element_types=table element_types=image`` keeps rows that
  have both, like every other pair of filters (on a single-valued field such as
  ``doc_id`` that is an empty result, which is what the two conditions mean). ``|`` is
  the one way to say OR; merging repeats into a set would make the meaning of a filter
  depend on its neighbours.
* Ranges only on numeric and date fields. Keyword and ``metadata.<key>`` (``flattened``)
  values are compared as strings, where ``"10" < "9"`` and ``"1.10" < "1.9"``: a version
  range would look right in a demo and be wrong in production. Versions are filtered by
  listing them (``metadata.version=2.0|2.1``).
* Equality on a date is a range over the value's precision: a bare day
  (``updated_at=2024-05-01``) covers that whole day (``||/d`` rounding), a datetime is
  that instant, rounded date math (``now/d``) covers its rounding unit.
* ``metadata`` itself accepts only ``?``; an equality on it would match the value under
  any key, which is never what ``metadata=pro`` means. Use ``metadata.<key>``.
* Analysed ``text`` fields are refused (a term filter on them compares against tokens,
  not the stored value); the error names the keyword subfield when there is one.
* The ACL fields and the vector field are never user-filterable: the ACL is applied by
  es-rag itself, and a user clause on ``tenant_id`` could at best duplicate it and at
  worst confuse a reader of the request into thinking it is the access check.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

from es_rag.errors import FilterError

Op = Literal["eq", "in", "gte", "gt", "lte", "lt", "exists"]
RANGE_OPS: frozenset[str] = frozenset({"gte", "gt", "lte", "lt"})
ALL_OPS: frozenset[str] = frozenset({"eq", "in", "exists"} | RANGE_OPS)

ACCESS_FIELDS: frozenset[str] = frozenset(
    {"tenant_id", "visibility", "allowed_principals", "denied_principals"}
)
VECTOR_FIELDS: frozenset[str] = frozenset({"embedding"})


@dataclass(frozen=True)
class FieldFilter:
    """One condition on one field; ``value`` is a tuple for ``in`` and None for ``exists``.

    Values stay as the user wrote them (strings from the CLI) until ``to_clauses`` knows
    the field's type, because ``"10"`` is a number on ``page_start`` and a string on
    ``doc_version``.
    """

    field: str
    op: Op
    value: Any = None


# --------------------------------------------------------------------------- parsing

_FIELD_RE = re.compile(r"[A-Za-z_@][\w@-]*(?:\.[\w@-]+)*")
_OPERATORS: dict[str, Op] = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt", "=": "eq"}
# A lone "|" separates set members; "||" is left alone because it is date math's anchor
# separator (updated_at>=2024-05-01||-1M).
_SET_SEPARATOR = re.compile(r"(?<!\|)\|(?!\|)")
_SYNTAX_HELP = "expected field=value, field=v1|v2, field>=v, field>v, field<=v, field<v or field?"


def parse_filter(expr: str) -> FieldFilter:
    """Parse one CLI expression; types are checked later, against the mapping."""
    text = expr.strip()
    if not text:
        raise FilterError(f"empty filter; {_SYNTAX_HELP}")
    at = next((i for i, ch in enumerate(text) if ch in "=<>"), None)
    if at is None:
        if text.endswith("?"):
            return FieldFilter(_check_field_name(text[:-1].strip(), expr), "exists")
        raise FilterError(f"filter {expr!r} has no operator; {_SYNTAX_HELP}")

    field = _check_field_name(text[:at].strip(), expr)
    symbol = text[at : at + 2] if text[at : at + 2] in (">=", "<=") else text[at]
    op = _OPERATORS[symbol]
    value = text[at + len(symbol) :].strip()
    if not value:
        raise FilterError(f"filter {expr!r} has no value after {symbol!r}; {_SYNTAX_HELP}")
    if value[0] in "=<>":
        swapped = (value[0] + symbol) if symbol == "=" and value[0] in "<>" else None
        hint = f"did you mean {swapped!r}?" if swapped else "use a single operator"
        raise FilterError(
            f"filter {expr!r}: value {value!r} starts with an operator character ({hint}); "
            f"{_SYNTAX_HELP}"
        )
    members = _SET_SEPARATOR.split(value)
    if len(members) == 1:
        return FieldFilter(field, op, value)
    if op != "eq":
        raise FilterError(f"filter {expr!r}: a set (v1|v2) is only allowed with '='")
    members = [m.strip() for m in members]
    if not all(members):
        raise FilterError(f"filter {expr!r} has an empty member in its set")
    return FieldFilter(field, "in", tuple(dict.fromkeys(members)))


def _check_field_name(field: str, expr: str) -> str:
    if not field:
        raise FilterError(f"filter {expr!r} has no field name; {_SYNTAX_HELP}")
    if not _FIELD_RE.fullmatch(field):
        hint = " (negation is not supported)" if field.endswith("!") else ""
        raise FilterError(f"filter {expr!r}: {field!r} is not a field name{hint}; {_SYNTAX_HELP}")
    return field


def parse_filters(exprs: Sequence[str]) -> list[FieldFilter]:
    """Parse each expression in order; repeats of a field stay separate (AND), see module doc."""
    if isinstance(exprs, str):
        raise TypeError("parse_filters takes a sequence of expressions, not one string")
    return [parse_filter(e) for e in exprs]


# --------------------------------------------------------------------------- mapping


_SAME_RULES = {"flat_object": "flattened"}


def field_types(mapping_properties: dict[str, Any]) -> dict[str, str]:
    """Every addressable path of a mapping with its type, multi-fields included.

    Objects without an explicit type are listed as ``object`` and their children are
    walked; ``nested`` children are not listed, since a plain filter cannot reach them.
    """
    out: dict[str, str] = {}

    def walk(props: dict[str, Any], prefix: str) -> None:
        for name, spec in props.items():
            path = f"{prefix}{name}"
            kind = spec.get("type", "object" if "properties" in spec else "unknown")
            kind = _SAME_RULES.get(kind, kind)
            out[path] = kind
            for sub, sub_spec in spec.get("fields", {}).items():
                out[f"{path}.{sub}"] = sub_spec.get("type", "unknown")
            if kind == "object":
                walk(spec.get("properties", {}), f"{path}.")

    walk(mapping_properties, "")
    return out


# --------------------------------------------------------------------------- values


def _as_keyword(f: FieldFilter, v: Any) -> str:
    if isinstance(v, bool) or not isinstance(v, (str, int)):
        raise FilterError(f"{f.field}: {v!r} is not a string")
    return str(v)


def _as_boolean(f: FieldFilter, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise FilterError(f"{f.field}: {v!r} is not true or false")


def _as_ip(f: FieldFilter, v: Any) -> str:
    try:
        ipaddress.ip_network(str(v), strict=False)  # an address or a CIDR block
    except ValueError:
        raise FilterError(f"{f.field}: {v!r} is not an IP address or CIDR block") from None
    return str(v)


def _as_number(f: FieldFilter, v: Any, integral: bool) -> int | float:
    number: int | float
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise FilterError(f"{f.field}: {v!r} is not a number")
    if isinstance(v, str):
        text = v.strip()
        if integral and re.fullmatch(r"[+-]?\d+", text):
            return int(text)  # exact, even past float precision
        try:
            number = float(text)
        except ValueError:
            raise FilterError(f"{f.field}: {v!r} is not a number") from None
    else:
        number = v
    if not math.isfinite(number):
        raise FilterError(f"{f.field}: {v!r} is not a finite number")
    if not integral:
        return float(number)
    if isinstance(number, float) and not number.is_integer():
        raise FilterError(f"{f.field}: {v!r} is not a whole number (the field is integral)")
    return int(number)


def _as_integer(f: FieldFilter, v: Any) -> int | float:
    return _as_number(f, v, integral=True)


def _as_float(f: FieldFilter, v: Any) -> int | float:
    return _as_number(f, v, integral=False)


_ISO_RE = re.compile(
    r"(?P<day>\d{4}-\d{2}-\d{2})"
    r"(?:T(?P<h>\d{2}):(?P<m>\d{2})(?::(?P<s>\d{2})(?:\.\d{1,9})?)?"
    r"(?:Z|[+-]\d{2}:?\d{2})?)?"
)
_MATH_RE = re.compile(r"(?:[+-]\d+[yMwdhHms])*(?:/[yMwdhHms])?")


def _is_iso(text: str) -> tuple[bool, bool]:
    """(valid, date only). Cheap on purpose: the server is the final judge of the rest."""
    m = _ISO_RE.fullmatch(text)
    if not m:
        return False, False
    try:
        date.fromisoformat(m["day"])
    except ValueError:
        return False, False
    if m["h"] is not None and (
        int(m["h"]) > 23 or int(m["m"]) > 59 or (m["s"] is not None and int(m["s"]) > 59)
    ):
        return False, False
    return True, m["h"] is None


def _as_date(f: FieldFilter, v: Any) -> str:
    """ISO-8601 (``2024-05-01``, ``2024-05-01T10:00:00Z``) or date math (``now-30d/d``,
    ``2024-05-01||+1M``); epoch numbers are refused because their unit is ambiguous."""
    text = v.strip() if isinstance(v, str) else None
    if text is not None:
        anchor, sep, tail = text.partition("||")
        if text.startswith("now"):
            ok = not sep and bool(_MATH_RE.fullmatch(text[3:]))
        else:
            ok = _is_iso(anchor)[0] and (not sep or bool(tail)) and bool(_MATH_RE.fullmatch(tail))
        if ok:
            return text
    raise FilterError(
        f"{f.field}: {v!r} is not a date; use ISO-8601 (2024-05-01, 2024-05-01T10:00:00Z) "
        "or date math (now-30d, now/d, 2024-05-01||+1M)"
    )


# --------------------------------------------------------------------------- translators

Normalizer = Callable[[FieldFilter, Any], Any]
Translator = Callable[[FieldFilter, Normalizer], dict[str, Any]]


def _term(f: FieldFilter, norm: Normalizer) -> dict[str, Any]:
    return {"term": {f.field: norm(f, f.value)}}


def _terms(f: FieldFilter, norm: Normalizer) -> dict[str, Any]:
    if isinstance(f.value, (str, bytes)) or not isinstance(f.value, Sequence) or not f.value:
        raise FilterError(f"{f.field}: 'in' needs a non-empty list of values")
    return {"terms": {f.field: list(dict.fromkeys(norm(f, v) for v in f.value))}}


def _exists(f: FieldFilter, norm: Normalizer) -> dict[str, Any]:
    if f.value is not None:
        raise FilterError(f"{f.field}: 'exists' takes no value")
    return {"exists": {"field": f.field}}


def _range(f: FieldFilter, norm: Normalizer) -> dict[str, Any]:
    return {"range": {f.field: {f.op: norm(f, f.value)}}}


def _date_eq(f: FieldFilter, norm: Normalizer) -> dict[str, Any]:
    value = norm(f, f.value)
    if _is_iso(value) == (True, True):
        value = f"{value}||/d"  # gte rounds down, lte rounds up: the whole day
    return {"range": {f.field: {"gte": value, "lte": value}}}


def _check_value(translate: Translator) -> Translator:
    def checked(f: FieldFilter, norm: Normalizer) -> dict[str, Any]:
        if f.value is None:
            raise FilterError(f"{f.field}: {f.op!r} needs a value")
        return translate(f, norm)

    return checked


_KEYWORD_OPS: dict[str, Translator] = {
    "eq": _check_value(_term),
    "in": _check_value(_terms),
    "exists": _exists,
}
_NUMERIC_OPS: dict[str, Translator] = {
    **_KEYWORD_OPS,
    **{op: _check_value(_range) for op in RANGE_OPS},
}
_DATE_OPS: dict[str, Translator] = {
    "eq": _check_value(_date_eq),
    "exists": _exists,
    **{op: _check_value(_range) for op in RANGE_OPS},
}
_FLATTENED_ROOT_OPS: dict[str, Translator] = {"exists": _exists}

_INTEGRAL = ("integer", "long", "short", "byte", "unsigned_long")
_FRACTIONAL = ("float", "double", "half_float", "scaled_float")

# The table: mapping type → (normalizer of one value, translator per op).
RULES: dict[str, tuple[Normalizer, dict[str, Translator]]] = {
    "keyword": (_as_keyword, _KEYWORD_OPS),
    "constant_keyword": (_as_keyword, _KEYWORD_OPS),
    "boolean": (_as_boolean, _KEYWORD_OPS),
    "ip": (_as_ip, _KEYWORD_OPS),
    **{t: (_as_integer, _NUMERIC_OPS) for t in _INTEGRAL},
    **{t: (_as_float, _NUMERIC_OPS) for t in _FRACTIONAL},
    "date": (_as_date, _DATE_OPS),
    "date_nanos": (_as_date, _DATE_OPS),
    "flattened": (_as_keyword, _FLATTENED_ROOT_OPS),
    # A key under a flattened field: its leaves are indexed as keywords.
    "flattened_key": (_as_keyword, _KEYWORD_OPS),
}

_STRING_RANGE = "values compare as strings ('10' < '9', '1.10' < '1.9'); list them with v1|v2"
_OP_ADVICE = {
    "keyword": _STRING_RANGE,
    "constant_keyword": _STRING_RANGE,
    "flattened_key": _STRING_RANGE,
    "flattened": "filter one key instead: <field>.<key>=value",
    "date": "use a range (>=, <=) instead of a set",
    "date_nanos": "use a range (>=, <=) instead of a set",
}


# --------------------------------------------------------------------------- entry point


def to_clauses(filters: Sequence[FieldFilter], types: dict[str, str]) -> list[dict[str, Any]]:
    """One filter clause per ``FieldFilter``, in order; ``types`` comes from ``field_types``."""
    return [_to_clause(f, types) for f in filters]


def _to_clause(f: FieldFilter, types: dict[str, str]) -> dict[str, Any]:
    kind = resolve_type(f.field, types)
    if f.op not in ALL_OPS:
        raise FilterError(f"{f.field}: unknown operator {f.op!r}; one of {sorted(ALL_OPS)}")
    rule = RULES.get(kind)
    if rule is None:
        raise FilterError(f"{f.field} is a {kind} field, which cannot be filtered")
    normalize, ops = rule
    translate = ops.get(f.op)
    if translate is None:
        advice = _OP_ADVICE.get(kind, "")
        raise FilterError(
            f"{f.field} ({_describe(kind)}) does not support {f.op!r}; "
            f"allowed: {', '.join(sorted(ops))}" + (f" — {advice}" if advice else "")
        )
    return translate(f, normalize)


def _describe(kind: str) -> str:
    return "a metadata key" if kind == "flattened_key" else kind


def resolve_type(field: str, types: dict[str, str]) -> str:
    """The filter rule a field follows (a metadata key is ``flattened_key``); refuses
    access-control, vector, analysed-text and unknown fields with a reason."""
    root = field.split(".", 1)[0]
    if root in ACCESS_FIELDS:
        raise FilterError(
            f"{field} is reserved for access control; es-rag applies the caller's ACL itself"
        )
    if root in VECTOR_FIELDS:
        raise FilterError(f"{field} is reserved for vector search and cannot be filtered")
    kind = types.get(field)
    if kind == "text":
        keyword = sorted(
            (p for p, t in types.items() if p.startswith(f"{field}.") and t == "keyword"),
            key=lambda p: p != f"{field}.keyword",
        )
        hint = f"; filter on {keyword[0]} for the exact value" if keyword else ""
        raise FilterError(f"{field} is an analysed text field, not filterable{hint}")
    if kind is not None:
        return kind
    parts = field.split(".")
    for i in range(len(parts) - 1, 0, -1) if all(parts) else ():
        if types.get(".".join(parts[:i])) == "flattened":
            return "flattened_key"
    raise FilterError(f"unknown field {field!r}; valid fields include {_suggest(field, types)}")


def _suggest(field: str, types: dict[str, str]) -> str:
    usable = sorted(
        p
        for p, t in types.items()
        if t in RULES and p.split(".", 1)[0] not in ACCESS_FIELDS | VECTOR_FIELDS
    )
    close = difflib.get_close_matches(field, usable, n=3, cutoff=0.6)
    shown = list(dict.fromkeys([*close, *usable]))[:8]
    flattened = [p for p in usable if types[p] == "flattened"]
    extra = [f"{p}.<key>" for p in flattened if f"{p}.<key>" not in shown]
    return ", ".join(shown + extra[:1])
