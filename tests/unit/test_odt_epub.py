"""OpenDocument and EPUB read by es-rag (es_rag.parsing.opendoc, es_rag.parsing.epub): the HTML
they become, and the clear error for each way such a package can be bad. The whole path
(the sandbox, Unstructured's HTML partitioner, chunking, the index) is in
tests/integration/test_parsing.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import html as lxml_html

from es_rag.errors import CorruptDocumentError, DocumentTooLargeError, EncryptedDocumentError
from es_rag.parsing.epub import epub_chapters
from es_rag.parsing.opendoc import MAX_CELLS, odp_slides, ods_sheets, odt_html
from tests import documents as d

pytestmark = pytest.mark.unit


def _blocks(page: str) -> list[tuple[str, str]]:
    body = lxml_html.fromstring(page).find("body")
    return [(el.tag, el.text_content()) for el in body]


def test_odt_blocks_in_reading_order(tmp_path: Path) -> None:
    page, title = odt_html(str(d.odt_policy(tmp_path / "p.odt")))
    assert title == d.ODT_TITLE
    blocks = _blocks(page)
    assert [b for b in blocks if b[0] in ("h1", "h2")] == [
        ("h1", d.ODT_TITLE),
        ("h1", "Meals"),
        ("h2", "Reporting"),
        ("h1", "Hotels"),
    ]
    # Paragraphs of a code style in a row are one <pre>; the empty one that ends the run
    # is dropped; a footnote follows its paragraph.
    assert [text for tag, text in blocks if tag == "pre"] == [d.ODT_LISTING, d.ODT_MONO]
    meals = [text for _, text in blocks].index("Meals")
    # The XML's line end inside the paragraph is a space, as is <text:s/>.
    assert blocks[meals + 1] == (
        "p",
        "Each traveller may claim a daily meal allowance of 45 euros.",
    )
    assert blocks[meals + 2] == ("p", d.ODT_FOOTNOTE)
    assert not [hidden for hidden in d.ODT_HIDDEN if hidden in page]


def test_odt_table_drops_its_padding_and_keeps_nested_lists(tmp_path: Path) -> None:
    page, _ = odt_html(str(d.odt_policy(tmp_path / "p.odt")))
    root = lxml_html.fromstring(page)
    rows = [[td.text_content() for td in tr] for tr in root.iter("tr")]
    assert rows == [["City", "Nightly rate"], ["Lyon", "120 EUR"], ["Paris", "180 EUR"]]
    assert [li.text for li in root.iter("li")] == [
        "in Lyon, at the harbour hotel",
        "in Paris, near the office",
        "never more than three nights",
    ]


_HOTELS = '<text:h text:style-name="Heading_20_1" text:outline-level="1">Hotels</text:h>'


def _hotels_as(tmp_path: Path, xml: str) -> str:
    """The policy as HTML, its "Hotels" heading written as ``xml``."""
    content = d.ODT_CONTENT.replace(_HOTELS, xml)
    return odt_html(str(d.odt_policy(tmp_path / "p.odt", {"content.xml": content})))[0]


def test_odt_headings_inside_lists_stay_headings(tmp_path: Path) -> None:
    """Outline numbering as older OpenOffice writes it: each heading inside a list item."""
    page = _hotels_as(
        tmp_path,
        '<text:list text:style-name="Numbering"><text:list-item><text:h text:outline-level="1">'
        "Hotels</text:h><text:p>Booked centrally.</text:p></text:list-item></text:list>",
    )
    blocks = _blocks(page)
    at = blocks.index(("h1", "Hotels"))
    assert blocks[at + 1] == ("p", "Booked centrally.")


def test_odt_hidden_section_is_left_out(tmp_path: Path) -> None:
    page = _hotels_as(
        tmp_path,
        '<text:section text:name="Draft" text:display="none"><text:p>Unpublished rates.</text:p>'
        '</text:section><text:h text:outline-level="1">Hotels</text:h>',
    )
    assert "Unpublished" not in page and "<h1>Hotels</h1>" in page


def test_flat_odt_reads_as_the_zipped_one(tmp_path: Path) -> None:
    """A flat OpenDocument file (.fodt) is the package's parts in one XML document."""
    flat = odt_html(str(d.fodt_policy(tmp_path / "p.fodt")))
    assert flat == odt_html(str(d.odt_policy(tmp_path / "p.odt")))


def test_odt_title_paragraph_when_meta_has_none(tmp_path: Path) -> None:
    _, title = odt_html(str(d.odt_policy(tmp_path / "p.odt", {"meta.xml": None})))
    assert title == d.ODT_TITLE


def test_odt_title_paragraph_with_direct_formatting(tmp_path: Path) -> None:
    """Writer gives a formatted title paragraph an automatic style whose parent is Title."""
    content = d.ODT_CONTENT.replace(
        "<office:automatic-styles>",
        '<office:automatic-styles><style:style style:name="P9" style:family="paragraph"'
        ' style:parent-style-name="Title"/>',
    ).replace('<text:p text:style-name="Title">', '<text:p text:style-name="P9">')
    parts: d.Parts = {"content.xml": content, "meta.xml": None}
    page, title = odt_html(str(d.odt_policy(tmp_path / "p.odt", parts)))
    assert title == d.ODT_TITLE and f"<h1>{d.ODT_TITLE}</h1>" in page


def test_odt_heading_style_on_a_plain_paragraph(tmp_path: Path) -> None:
    """Some writers set "Heading 2" on a text:p instead of writing a text:h."""
    content = d.ODT_CONTENT.replace(
        '<text:h text:style-name="Heading_20_2" text:outline-level="2">Reporting</text:h>',
        '<text:p text:style-name="P8">Reporting</text:p>',
    ).replace(
        "<office:automatic-styles>",
        '<office:automatic-styles><style:style style:name="P8" style:family="paragraph"'
        ' style:parent-style-name="Heading_20_2"/>',
    )
    styles = d.ODT_STYLES.replace(
        "</office:styles>",
        '<style:style style:name="Heading_20_2" style:display-name="Heading 2"'
        ' style:family="paragraph"/></office:styles>',
    )
    parts: d.Parts = {"content.xml": content, "styles.xml": styles}
    page, _ = odt_html(str(d.odt_policy(tmp_path / "p.odt", parts)))
    assert "<h2>Reporting</h2>" in page


def test_odt_password_is_refused_as_encrypted(tmp_path: Path) -> None:
    manifest = d.ODT_MANIFEST.replace(
        'manifest:full-path="content.xml" manifest:media-type="text/xml"/>',
        'manifest:full-path="content.xml" manifest:media-type="text/xml">'
        '<manifest:encryption-data manifest:checksum-type="SHA1/1K" manifest:checksum="x">'
        '<manifest:algorithm manifest:algorithm-name="Blowfish CFB"/></manifest:encryption-data>'
        "</manifest:file-entry>",
    )
    path = d.odt_policy(
        tmp_path / "p.odt", {"META-INF/manifest.xml": manifest, "content.xml": b"\x8f\x02binary"}
    )
    with pytest.raises(EncryptedDocumentError, match="password"):
        odt_html(str(path))


@pytest.mark.parametrize(
    ("parts", "match"),
    [
        ({"content.xml": None}, "without content.xml"),
        ({"content.xml": "<office:document-content>"}, "not well-formed"),
        ({"content.xml": d.ODT_CONTENT.replace("<office:body>", "")}, "not well-formed"),
        ({"content.xml": f"<office:document-content {d._ODF_NS}/>"}, "without its text body"),
    ],
)
def test_damaged_odt_is_a_clear_error(tmp_path: Path, parts: d.Parts, match: str) -> None:
    with pytest.raises(CorruptDocumentError, match=match):
        odt_html(str(d.odt_policy(tmp_path / "p.odt", parts)))


def test_odt_external_entities_are_not_read(tmp_path: Path) -> None:
    """An external entity naming a local file in content.xml: the XML parser does not
    substitute entities, so the file's text never reaches the index."""
    doctype = '<!DOCTYPE office:document-content [<!ENTITY f SYSTEM "file:///etc/passwd">]>'
    content = d.ODT_CONTENT.replace(
        "<office:document-content", doctype + "<office:document-content", 1
    ).replace("Hotel nights", "&f; Hotel nights")
    page, _ = odt_html(str(d.odt_policy(tmp_path / "p.odt", {"content.xml": content})))
    assert "root:" not in page
    assert "Hotel nights are booked" in page


def test_odt_entity_bomb_is_refused(tmp_path: Path) -> None:
    lol = "".join(
        f'<!ENTITY l{i} "{("&l" + str(i - 1) + ";") * 10 if i else "lol"}">' for i in range(9)
    )
    content = d.ODT_CONTENT.replace(
        "<office:document-content",
        f"<!DOCTYPE office:document-content [{lol}]><office:document-content",
        1,
    ).replace("Hotel nights", "&l8; Hotel nights")
    with pytest.raises(CorruptDocumentError, match=r"content\.xml"):
        odt_html(str(d.odt_policy(tmp_path / "p.odt", {"content.xml": content})))


def test_epub_chapters_in_spine_order_without_navigation(tmp_path: Path) -> None:
    chapters, title = epub_chapters(str(d.epub_guide(tmp_path / "g.epub")))
    assert title == d.EPUB_TITLE
    # The nav document and the SVG are in the spine; only XHTML chapters are read.
    assert [name for name, _ in chapters] == ["OEBPS/text/ch01.xhtml", "OEBPS/text/ch02.xhtml"]


def test_epub_with_encrypted_chapters_is_refused(tmp_path: Path) -> None:
    drm = d.epub_drm("OEBPS/text/ch02.xhtml")
    path = d.epub_guide(tmp_path / "g.epub", {"META-INF/encryption.xml": drm})
    with pytest.raises(EncryptedDocumentError, match="DRM"):
        epub_chapters(str(path))


@pytest.mark.parametrize(
    ("parts", "match"),
    [
        ({"META-INF/container.xml": None}, "without META-INF/container.xml"),
        ({"OEBPS/content.opf": None}, "names no package document"),
        ({"OEBPS/text/ch02.xhtml": None}, "spine names 'OEBPS/text/ch02.xhtml'"),
        ({"OEBPS/content.opf": "<package"}, "not well-formed"),
        (
            {
                "OEBPS/content.opf": '<package xmlns="http://www.idpf.org/2007/opf"><spine/></package>'
            },
            "lists no chapter",
        ),
    ],
)
def test_damaged_epub_is_a_clear_error(tmp_path: Path, parts: d.Parts, match: str) -> None:
    with pytest.raises(CorruptDocumentError, match=match):
        epub_chapters(str(d.epub_guide(tmp_path / "g.epub", parts)))


def _sheet(rows: str) -> str:
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<office:document-content {d._ODF_NS}><office:body><office:spreadsheet>
<table:table table:name="Data">{rows}</table:table>
</office:spreadsheet></office:body></office:document-content>"""


def _ods(path: Path, content: str) -> Path:
    return d.odf_package(
        path,
        {"content.xml": content, "META-INF/manifest.xml": d.ODT_MANIFEST},
        mimetype="application/vnd.oasis.opendocument.spreadsheet",
    )


def _row(cells: str, repeat: int = 1) -> str:
    return f'<table:table-row table:number-rows-repeated="{repeat}">{cells}</table:table-row>'


def _cell(text: str = "", repeat: int = 1) -> str:
    inner = f"<text:p>{text}</text:p>" if text else ""
    return f'<table:table-cell table:number-columns-repeated="{repeat}">{inner}</table:table-cell>'


def test_ods_repeats_are_spelt_out_and_padding_dropped(tmp_path: Path) -> None:
    """Repeated cells between values keep the columns aligned; the empty rows and columns
    that pad a sheet to a million rows and a thousand columns are not written."""
    rows = (
        _row(_cell("a") + _cell(repeat=2) + _cell("d") + _cell(repeat=1020))
        + _row(_cell(repeat=1024), repeat=3)
        + _row(_cell("x", repeat=2) + _cell(repeat=1022), repeat=2)
        + _row(_cell(repeat=1024), repeat=1_048_000)
    )
    sheets, _ = ods_sheets(str(_ods(tmp_path / "s.ods", _sheet(rows))))
    root = lxml_html.fromstring(sheets[0][1])
    assert sheets[0][0] == "Data"
    assert [[td.text_content() for td in tr] for tr in root.iter("tr")] == [
        ["a", "", "", "d"],
        ["x", "x", "", ""],
        ["x", "x", "", ""],
    ]


def test_ods_value_repeated_past_the_limit_is_too_large(tmp_path: Path) -> None:
    rows = _row(_cell("same", repeat=100), repeat=MAX_CELLS // 50)
    with pytest.raises(DocumentTooLargeError, match="cells"):
        ods_sheets(str(_ods(tmp_path / "s.ods", _sheet(rows))))


def test_odp_slides_keep_their_numbers_and_notes(tmp_path: Path) -> None:
    slides, title = odp_slides(str(d.odp_deck(tmp_path / "deck.odp")))
    assert title is None  # odfpy writes no dc:title; the parser then takes the first heading
    assert [s.title for s in slides] == [t for t, _ in d.ODP_SLIDES]
    assert slides[0].notes == d.ODP_NOTES and not slides[1].notes
    assert "<pre>" in slides[1].html and not slides[3].html
