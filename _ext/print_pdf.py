"""Print the single-page HTML build of the book into one PDF with the machine's Chromium.

    python _ext/print_pdf.py _build/singlehtml/intro.html _build/pdf/book.pdf

No LaTeX: Chromium (driven through playwright, with the network refused) loads the page, waits
until MathJax has typeset every formula, and prints it with the site's print stylesheet.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def print_pdf(html: Path, pdf: Path, chromium: str | None = None) -> Path:
    """Print ``html`` to ``pdf``; return the path of the PDF."""
    from playwright.sync_api import sync_playwright

    chromium = chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("make pdf: chromium is not installed (apt-get install chromium)")
    if not html.is_file():
        raise SystemExit(f"make pdf: {html} does not exist (build the singlehtml book first)")
    pdf.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 1400})
        page.route("**/*", lambda route: route.continue_()
                   if route.request.url.startswith("file:") else route.abort())
        page.goto(html.resolve().as_uri(), wait_until="load", timeout=300_000)
        page.evaluate("() => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
                      " || null")
        typeset = page.evaluate("() => document.querySelectorAll('mjx-container').length")
        unrendered = page.evaluate("() => document.querySelectorAll('mjx-merror').length")
        if unrendered or not typeset:
            raise SystemExit(f"make pdf: MathJax typeset {typeset} formulas, {unrendered} errors")
        page.emulate_media(media="print")
        page.pdf(path=str(pdf), format="A4", print_background=True,
                 margin={"top": "15mm", "bottom": "15mm", "left": "12mm", "right": "12mm"},
                 display_header_footer=True, header_template="<span></span>",
                 footer_template='<div style="font-size:8px;width:100%;text-align:center">'
                 '<span class="pageNumber"></span> / <span class="totalPages"></span></div>')
        browser.close()
    return pdf


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    out = print_pdf(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB)")
