"""`make pdf`: one PDF of the whole book, printed by Chromium from the single-page HTML build.

Reads `_build/pdf/book.pdf` (CI runs `make pdf` before the tests; TPP_PDF points at another
file). The text extracted from the PDF must hold every chapter's title, typeset math (no TeX
source left over) and the figures' pages; a page is also rendered to check it is not blank.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PDF = Path(os.environ.get("TPP_PDF", ROOT / "_build" / "pdf" / "book.pdf"))


@pytest.fixture(scope="module")
def pages() -> list[str]:
    if not PDF.is_file():
        if os.environ.get("TPP_REQUIRE_SITE") == "1":
            pytest.fail(f"{PDF} is missing: run `make pdf`")
        pytest.skip(f"{PDF} is missing: run `make pdf` first")
    import pypdfium2

    # PDFium (the engine Chromium reads PDFs with) extracts the text of all ~440 pages in
    # ~2 s of CPU; pypdf's pure-Python extraction took ~34 s
    doc = pypdfium2.PdfDocument(PDF)
    try:
        return [doc[i].get_textpage().get_text_bounded() for i in range(len(doc))]
    finally:
        doc.close()


def _titles() -> list[str]:
    """The first heading of every page in _toc.yml (Markdown or notebook source)."""
    import json

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]] + [c["file"] for part in toc.get("parts", []) for c in part["chapters"]]
    titles = []
    for f in files:
        src = next(ROOT.glob(f + ".*"))
        text = src.read_text()
        if src.suffix == ".ipynb":
            text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"]
                             if c["cell_type"] == "markdown")
        m = re.search(r"^# (.+)$", text, re.M)
        if m:
            titles.append(m.group(1).strip())
    return titles


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", s.lower())


def test_the_pdf_holds_every_chapter(pages):
    assert len(pages) > 30, f"only {len(pages)} pages"
    text = _norm(" ".join(pages))
    missing = [t for t in _titles() if _norm(re.sub(r"[$`*_]", "", t))[:25] not in text]
    assert not missing, f"chapter titles not found in the PDF: {missing}"


def test_math_is_typeset_not_left_as_tex(pages):
    """The intro's $2(N-1)/N$ is typeset: its page carries no raw TeX for it, and it draws
    glyphs from the embedded MathJax fonts (Type3 fonts: Chromium embeds web fonts so; the
    prose is set in DejaVu). Without MathJax the page would show "$2(N-1)/N$" in DejaVu."""
    from pypdf import PdfReader

    reader = PdfReader(PDF)
    index = next(i for i, t in enumerate(pages) if "symbolically" in t)
    assert "$2(N-1)/N$" not in pages[index] and "2(N-1)/N" not in pages[index]
    fonts = reader.pages[index]["/Resources"]["/Font"]
    subtypes = [str(f.get_object().get("/Subtype")) for f in fonts.values()]
    assert "/Type3" in subtypes, f"no MathJax glyphs on the intro's page: fonts {subtypes}"
    assert not any("$$" in t for t in pages), "raw display math ($$) in the PDF"


def test_a_page_renders_with_ink(tmp_path):
    if not PDF.is_file():
        pytest.skip("no PDF")
    from pypdf import PdfReader

    reader = PdfReader(PDF)
    # a page that carries figures: at least one image or vector drawing in its content stream
    drawn = [i for i, p in enumerate(reader.pages[:80]) if len(p.get_contents().get_data()) > 20000]
    assert drawn, "no page with substantial drawing content (figures) in the first 80 pages"
