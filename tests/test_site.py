"""The built website: offline math, no external resources, hidden solutions, resolved citations.

These tests read `_build/html` (run `make book` first; TPP_SITE points them at another build).
Locally they skip when the site has not been built; CI sets TPP_REQUIRE_SITE=1 (and
TPP_REQUIRE_BROWSER=1), so there they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("TPP_SITE", ROOT / "_build" / "html"))

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Any network request goes to a closed port: the page must need none.
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
    "--virtual-time-budget=20000",
    "--dump-dom",
]


def _require(env: str, why: str) -> None:
    if os.environ.get(env) == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def site() -> Path:
    if not (HTML / "index.html").exists():
        _require("TPP_REQUIRE_SITE", "the site is not built: run `make book` first")
    return HTML


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [c["file"] for c in part["chapters"]]
    return pages


def _pages_with_exercises() -> list[str]:
    found = []
    for page in _toc_pages():
        src = next(ROOT.glob(page + ".*"), None)
        if src is not None and "{solution}" in src.read_text():
            found.append(page)
    return found


def test_every_toc_page_is_built(site: Path) -> None:
    missing = [p for p in _toc_pages() if not (site / f"{p}.html").exists()]
    assert not missing, f"pages in _toc.yml without HTML: {missing}"


def test_no_external_scripts_styles_or_fonts(site: Path) -> None:
    """The site must work offline: no <script src> or stylesheet from another host."""
    pattern = re.compile(r'<(?:script|link)[^>]+(?:src|href)="((?:https?:)?//[^"]+)"')
    offenders = {}
    for page in site.rglob("*.html"):
        hits = [u for u in pattern.findall(page.read_text(errors="replace"))]
        if hits:
            offenders[str(page.relative_to(site))] = hits
    assert not offenders, f"pages loading resources from the network: {offenders}"


def test_mathjax_is_bundled(site: Path) -> None:
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert (site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()
    math_pages = [
        p for p in site.rglob("*.html") if 'class="math' in p.read_text(errors="replace")
    ]
    assert math_pages, "no page has math: the chapters should display derivations"
    for page in math_pages:
        text = page.read_text(errors="replace")
        assert "_static/mathjax/tex-chtml.js" in text, f"{page.name} does not load local MathJax"


def test_solutions_are_hidden_in_dropdowns(site: Path) -> None:
    pages = _pages_with_exercises()
    assert pages, "no chapter has an exercise with a solution"
    for page in pages:
        html = (site / f"{page}.html").read_text(errors="replace")
        solutions = re.findall(r'<div class="([^"]*\bsolution\b[^"]*)"', html)
        assert solutions, f"{page}: no solution block rendered"
        assert all("dropdown" in cls for cls in solutions), f"{page}: a solution is not hidden"


def test_citations_resolve_to_the_bibliography(site: Path) -> None:
    html = (site / "intro.html").read_text(errors="replace")
    links = re.findall(r'href="([^"]*bibliography\.html#[^"]+)"', html)
    assert links, "intro cites papers: its citations should link to the bibliography"
    bib = (site / "chapters" / "bibliography.html").read_text(errors="replace")
    for link in links:
        anchor = link.split("#", 1)[1]
        assert f'id="{anchor}"' in bib, f"citation target {anchor} missing from bibliography"


def test_math_renders_with_the_network_off(site: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        _require("TPP_REQUIRE_BROWSER", "chromium is not installed (apt-get install chromium)")
    page = site / "chapters" / "01_collectives.html"
    assert page.exists()
    out = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={site.parent / '.chromium-test'}",
         page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    dom = out.stdout
    assert "<body" in dom, f"chromium produced no DOM: {out.stderr[-2000:]}"
    rendered = dom.count("<mjx-container")
    assert rendered > 0, "MathJax did not typeset any math offline"
    # A TeX error renders as an <mjx-merror> element (the stylesheet mentions it too, hence "<").
    assert "<mjx-merror" not in dom, "MathJax reported a TeX error on the page"


def test_exercises_page_lists_every_graded_assignment(site: Path) -> None:
    """chapters/exercises is generated from solutions/ at build time: every master appears,
    with a working download link to its exercise notebook."""
    import json

    html = (site / "chapters" / "exercises.html").read_text(errors="replace")
    masters = sorted((ROOT / "solutions").glob("*.ipynb"))
    assert masters, "no master notebook in solutions/"
    for master in masters:
        meta = json.loads(master.read_text())["metadata"]["tpp"]
        assert meta["assignment"] in html, f"{meta['assignment']} missing from the exercises page"
        links = re.findall(rf'href="([^"]*_downloads/[^"]*/{re.escape(master.name)})"', html)
        assert links, f"no download link for {master.name}"
        assert (site / "chapters" / links[0]).resolve().is_file(), links[0]
