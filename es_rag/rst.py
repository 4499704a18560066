"""reStructuredText → elements, with docutils (the reference parser).

reStructuredText is the source of most Python documentation (Sphinx projects, their
``_sources/*.rst.txt``) and of much else. Read as plain text, its directives became
headings (``.. versionadded::``, ``.. code-block:: python``) and its sections did not,
since reST underlines titles with any punctuation and orders levels by first use. docutils
reads it as its authors meant; es-rag walks the document tree it builds: sections as
titles at their depth, paragraphs, literal and doctest blocks as code, lists item by item,
definition and field lists as ``term: description``, tables with their rows.

Sphinx's own directives and roles are not docutils': the common ones are registered here so
that their content is read (``code-block`` as code, ``versionadded`` and ``seealso`` as
text, ``function``/``class``/… as their signature followed by their description) or left
out (``toctree``, ``index``, ``module``); an unknown role reads as the words it shows
(``:func:`~os.path.join``` → ``join``; ``:ref:`the guide <guide>``` → ``the guide``). Files
are never read from a document: ``include`` and ``raw`` with a file are refused, as are
``raw`` blocks.
"""

from __future__ import annotations

import io
import re
from collections import defaultdict
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from es_rag.types import Element

if TYPE_CHECKING:
    from docutils import nodes

_SETTINGS = {
    "report_level": 5,  # nothing reported, nothing halts: a bad construct stays text
    "halt_level": 5,
    "exit_status_level": 5,
    "warning_stream": io.StringIO(),
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "doctitle_xform": False,  # the first title stays a section, at level 1
    "sectsubtitle_xform": False,
    "syntax_highlight": "none",
    "_disable_config": True,
    "pep_references": False,
    "rfc_references": False,
    "input_encoding": "unicode",
}

# Signs that a file named .txt (or not named at all) is reStructuredText; each kind counts once.
_SIGNS = {
    "directive": re.compile(r"^\.\. [\w:-]{1,100}::(?:[ \t]|$)", re.M),
    "role": re.compile(r"(?<![\w`]):[\w:+.-]{1,100}:`[^`\n]{1,500}`"),
    "target": re.compile(r"^\.\. _[^:\n]{1,200}:(?:[ \t]|$)", re.M),
    "substitution": re.compile(r"^\.\. \|[^|\n]{1,200}\| [\w-]{1,100}::", re.M),
    "literal": re.compile(r"``[^`\n]{1,200}``"),
    "link": re.compile(r"`[^`<\n]{1,200} <[^>\n]{1,500}>`__?"),
}

_CODE = ("code-block", "sourcecode", "testcode", "testoutput", "doctest", "productionlist")
_LABELS = {
    "versionadded": "Added in version",
    "versionchanged": "Changed in version",
    "deprecated": "Deprecated since version",
    "deprecated-removed": "Deprecated since version",
    "availability": "Availability:",
}
_CONTENT = (*_LABELS, "seealso", "only", "hlist", "glossary", "centered", "tab", "tabs")
_DESCRIPTIONS = tuple(
    f"{domain}{name}"
    for domain in ("", "py:", "c:", "cpp:", "js:", "rst:", "std:")
    for name in (
        "function", "class", "method", "classmethod", "staticmethod", "attribute",
        "property", "data", "exception", "decorator", "decoratormethod",
        "type", "member", "macro", "var", "struct", "enum", "enumerator", "union",
        "directive", "role", "option", "cmdoption", "envvar", "describe", "object",
        "program", "opcode", "pdbcommand", "2to3fixer", "audit-event", "event",
    )
)  # fmt: skip
_DROPPED = (
    "toctree", "index", "module", "py:module", "currentmodule", "py:currentmodule",
    "sectionauthor", "moduleauthor", "codeauthor", "highlight", "literalinclude",
    "tabularcolumns", "default-domain", "testsetup", "testcleanup", "autosummary",
    "automodule", "autoclass", "autofunction", "automethod", "autoattribute", "autodata",
    "autoexception", "graphviz", "digraph", "inheritance-diagram", "raw",
)  # fmt: skip
_ROLE = re.compile(r"^:(?:[\w:+.-]+):`(.*)`$|^\|(.*)\|_{0,2}$", re.S)
_TITLED = re.compile(r"^(.*?)\s*<[^<>]*>$", re.S)


def looks_like_rst(text: str) -> bool:
    """Two kinds of reST-only markup: a ``.. note::`` with a ``:func:`x``` role, say. A
    double-backquoted literal alone is Markdown's too."""
    return sum(1 for sign in _SIGNS.values() if sign.search(text)) >= 2


def text_elements(text: str) -> list[Element]:
    """The elements of a reStructuredText document, in reading order."""
    from docutils import nodes
    from docutils.core import publish_doctree

    _register()
    tree = publish_doctree(text, settings_overrides=dict(_SETTINGS))
    for node in list(tree.findall(nodes.problematic)):
        node.parent.replace(node, nodes.Text(_shown(node.astext())))
    out: list[Element] = []
    _walk(tree, out, 0)
    return out


def _shown(raw: str) -> str:
    """What a role Sphinx would render shows: its title, or its target's last name."""
    role = _ROLE.match(raw.strip())
    if not role:
        return raw
    content = role.group(1) if role.group(1) is not None else role.group(2)
    titled = _TITLED.match(content)
    if titled and titled.group(1):
        return titled.group(1)
    content = content.lstrip("!")
    if content.startswith("~"):
        return content[1:].rsplit(".", 1)[-1]
    return content


def _walk(parent: nodes.Element, out: list[Element], depth: int) -> None:
    from docutils import nodes

    for node in parent.children:
        if isinstance(node, nodes.section):
            title = node.next_node(nodes.title)
            if title is not None:
                out.append(Element(kind="title", text=_text(title), level=depth + 1))
            _walk(node, out, depth + 1)
        elif isinstance(node, nodes.title) and isinstance(parent, nodes.section):
            continue
        elif isinstance(node, (nodes.paragraph, nodes.title, nodes.rubric, nodes.line_block)):
            text = _text(node)
            if text:
                out.append(Element(kind="text", text=text))
        elif isinstance(node, (nodes.literal_block, nodes.doctest_block)):
            out.append(Element(kind="code", text=node.astext().rstrip("\n")))
        elif isinstance(node, (nodes.bullet_list, nodes.enumerated_list)):
            _list(node, out, 0)
        elif isinstance(node, (nodes.definition_list, nodes.field_list, nodes.option_list)):
            _terms(node, out, depth)
        elif isinstance(node, nodes.table):
            out.append(_table(node))
        elif isinstance(node, nodes.system_message):
            _unknown_directive(node, out)
        elif isinstance(
            node,
            (nodes.comment, nodes.target, nodes.substitution_definition, nodes.raw,
             nodes.pending, nodes.image, nodes.transition, nodes.label),
        ):  # fmt: skip
            continue
        elif isinstance(node, nodes.Element):
            _walk(node, out, depth)  # quotes, admonitions, topics, containers, footnotes
        elif node.astext().strip():
            out.append(Element(kind="text", text=node.astext().strip()))


def _text(node: nodes.Node) -> str:
    """The node's words on one line; a line block (verse, an address) keeps its lines."""
    from docutils import nodes

    if isinstance(node, nodes.line_block):
        return node.astext().strip()
    return " ".join(node.astext().split())


def _list(node: nodes.Element, out: list[Element], level: int) -> None:
    """Each item's own paragraphs behind its marker (as es_rag.markdown writes them), its
    nested lists after it, one level further in."""
    from docutils import nodes

    start = int(node.get("start", 1))
    for n, item in enumerate(node.children):
        label = f"{start + n}." if isinstance(node, nodes.enumerated_list) else "-"
        own: list[str] = []
        nested: list[nodes.Element] = []
        for part in item.children:
            if isinstance(part, (nodes.bullet_list, nodes.enumerated_list)):
                nested.append(part)
            elif isinstance(part, (nodes.literal_block, nodes.doctest_block)):
                own.append(part.astext().rstrip("\n"))
            elif not isinstance(part, nodes.system_message):
                own.append(_text(part))
        body = "\n".join(line for line in own if line)
        out.append(Element(kind="list_item", text=f"{'  ' * level}{label} {body}".rstrip()))
        for sub in nested:
            _list(sub, out, level + 1)


def _terms(node: nodes.Element, out: list[Element], depth: int) -> None:
    """A term (a field's name, an option) and the first paragraph of its description as
    one text; the rest of the description after it."""
    from docutils import nodes

    for item in node.children:
        if not isinstance(item, nodes.Element):
            continue
        heads = [
            _text(part)
            for part in item.children
            if isinstance(
                part, (nodes.term, nodes.classifier, nodes.field_name, nodes.option_group)
            )
        ]
        body = next(
            (
                part
                for part in item.children
                if isinstance(part, (nodes.definition, nodes.field_body, nodes.description))
            ),
            None,
        )
        rest: list[nodes.Node] = list(body.children) if body is not None else []
        first = ""
        if rest and isinstance(rest[0], nodes.paragraph):
            first = _text(rest.pop(0))
        head = ", ".join(h for h in heads if h)
        out.append(Element(kind="text", text=f"{head}: {first}".strip() if first else head))
        if rest:
            holder = nodes.container()
            holder.extend(rest)
            _walk(holder, out, depth)


def _table(node: nodes.Element) -> Element:
    from docutils import nodes

    from es_rag.markdown import table_element

    return table_element(
        [
            [" ".join(entry.astext().split()) for entry in row.findall(nodes.entry)]
            for row in node.findall(nodes.row)
        ]
    )


def _unknown_directive(node: nodes.Element, out: list[Element]) -> None:
    """A directive neither docutils nor this module knows: its content as text (its
    options and arguments left out), rather than lost."""
    from docutils import nodes

    block = node.next_node(nodes.literal_block)
    if block is None or not block.astext().lstrip().startswith(".. "):
        return
    lines = block.astext().split("\n")[1:]
    content = [ln for ln in lines if not re.match(r"^\s*:[\w-]+:", ln)]
    text = " ".join(" ".join(content).split())
    if text:
        out.append(Element(kind="text", text=text))


@cache
def _register() -> None:
    """Sphinx's common directives, so that docutils reads their content (once a process)."""
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives

    class Lenient(Directive):
        """Any argument, any option, any content: Sphinx's, whatever its version."""

        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec: ClassVar[Any] = defaultdict(lambda: directives.unchanged)

        def nested(self, holder: nodes.Element) -> list[nodes.Node]:
            self.state.nested_parse(self.content, self.content_offset, holder)
            return [holder]

    class Code(Lenient):
        def run(self) -> list[nodes.Node]:
            return [nodes.literal_block(text="\n".join(self.content))]

    class Content(Lenient):
        def run(self) -> list[nodes.Node]:
            holder = nodes.container()
            label = _LABELS.get(self.name)
            if label and self.arguments:
                holder += nodes.paragraph(text=f"{label} {self.arguments[0]}".rstrip(".") + ".")
            elif self.arguments:
                holder += nodes.paragraph(text=self.arguments[0])
            return self.nested(holder)

    class Description(Lenient):
        def run(self) -> list[nodes.Node]:
            holder = nodes.container()
            for signature in (self.arguments[0] if self.arguments else "").split("\n"):
                if signature.strip():
                    holder += nodes.paragraph(text=signature.strip())
            return self.nested(holder)

    class Dropped(Lenient):
        def run(self) -> list[nodes.Node]:
            return []

    for names, kind in (
        (_CODE, Code),
        (_CONTENT, Content),
        (_DESCRIPTIONS, Description),
        (_DROPPED, Dropped),
    ):
        for name in names:
            directives.register_directive(name, kind)
