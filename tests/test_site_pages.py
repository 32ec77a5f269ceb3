"""Every page of the built site, in real Chromium with the network off.

On each page listed in `_toc.yml` (read at collection time, so new chapters are covered without
editing this file) the browser must find no raw Markdown table, no raw `$…$` math, no
unrendered MyST role or directive, no uncaught JavaScript error, no MathJax error, no image
without a meaningful alt text, and no code block wider than the content column.
A negative control page carries every defect and must be flagged for each.

Reads `_build/html` (or TPP_SITE). Skips without a build or a browser locally; CI sets
TPP_REQUIRE_SITE=1 and TPP_REQUIRE_BROWSER=1, so there it fails instead.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("TPP_SITE", ROOT / "_build" / "html"))
VIEWPORT = {"width": 1300, "height": 1000}

# Runs in the page once MathJax has finished: one list of problems per kind of defect.
INSPECT = r"""
() => {
  const main = document.querySelector('main') || document.body;
  const out = {table: [], dollar: [], role: [], alt: [], wide: [], merror: []};
  // visible prose: the article without code, math and scripts
  const prose = main.cloneNode(true);
  prose.querySelectorAll('pre, code, script, style, mjx-container, .MathJax, textarea')
       .forEach(e => e.remove());
  const text = prose.innerText || prose.textContent || '';
  for (const line of text.split('\n')) {
    if (/\|\s*:?-{3,}:?\s*\|/.test(line)) out.table.push(line.trim().slice(0, 120));
    const m = line.match(/\$[^$\n]{0,200}?[\\^_{}][^$\n]{0,200}?\$/);
    if (m) out.dollar.push(m[0].slice(0, 120));
    const r = line.match(/\{[a-z][\w:.-]*\}`[^`]*`|`{3,}\{[a-z]/);
    if (r) out.role.push(r[0].slice(0, 120));
  }
  for (const img of main.querySelectorAll('img')) {
    const alt = (img.getAttribute('alt') || '').trim();
    const file = (img.getAttribute('src') || '').split('/').pop();
    const words = alt.split(/\s+/).filter(w => /[A-Za-z]{2,}/.test(w));
    const hashy = /^[0-9a-f]{12,}/i.test(alt) || /\.(png|svg|jpe?g|gif)$/i.test(alt)
                  || alt === file;
    if (words.length < 3 || hashy) out.alt.push(`${file}: alt=${JSON.stringify(alt)}`);
  }
  for (const pre of main.querySelectorAll('pre')) {
    if (pre.offsetParent === null) continue;          // hidden (e.g. a closed dropdown)
    if (pre.scrollWidth > pre.clientWidth + 2)
      out.wide.push(`${pre.scrollWidth}px > ${pre.clientWidth}px: `
                    + (pre.innerText || '').split('\n')[0].slice(0, 80));
  }
  out.merror = Array.from(main.querySelectorAll('mjx-merror'))
                    .map(e => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120));
  return out;
}
"""


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]

    def walk(entries):
        for entry in entries or []:
            if "file" in entry:
                pages.append(entry["file"])
            walk(entry.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    return pages


def _require(env: str, why: str) -> None:
    if os.environ.get(env) == "1":
        pytest.fail(why)
    pytest.skip(why)


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        _require("TPP_REQUIRE_BROWSER", "chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require("TPP_REQUIRE_BROWSER", "playwright is not installed (pip install -e '.[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def inspect_page(browser, url: str) -> dict[str, list[str]]:
    """Load ``url`` with every network request refused; return the problems found by kind."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
               else route.abort())
    try:
        page.goto(url, wait_until="load", timeout=60_000)
        page.evaluate(
            "() => (window.MathJax && MathJax.startup && MathJax.startup.promise) || null"
        )
        page.wait_for_timeout(200)
        found = page.evaluate(INSPECT)
    finally:
        context.close()
    found["js"] = errors
    return found


def _describe(found: dict[str, list[str]]) -> str:
    names = {
        "table": "raw Markdown table rows",
        "dollar": "raw $…$ math",
        "role": "unrendered MyST roles/directives",
        "js": "uncaught JavaScript errors",
        "alt": "images without a meaningful alt text",
        "wide": "code blocks wider than the column",
        "merror": "MathJax errors",
    }
    return "; ".join(f"{names[k]}: {v[:5]}" for k, v in found.items() if v)


@pytest.mark.parametrize("page", _toc_pages())
def test_page_renders_cleanly(browser, page: str) -> None:
    html = HTML / f"{page}.html"
    if not html.exists():
        if not (HTML / "index.html").exists():
            _require("TPP_REQUIRE_SITE", "the site is not built: run `make book` first")
        pytest.fail(f"{page} is in _toc.yml but {html} was not built")
    found = inspect_page(browser, html.as_uri())
    assert not any(found.values()), f"{page}: {_describe(found)}"


NEGATIVE_CONTROL = """<!doctype html><html><head><meta charset="utf-8"></head><body><main>
<p>| a | b |<br>| --- | --- |</p>
<p>The bubble is $\\frac{P-1}{M}$ here.</p>
<p>See {cite}`huang2019gpipe` and {glue:text}`ch07_x`.</p>
<img src="0123456789abcdef0123.png" alt="0123456789abcdef0123.png">
<img src="x.svg" alt="">
<pre style="white-space: pre; width: 300px; overflow: auto">{}</pre>
<script>undefined_function_of_the_control_page();</script>
</main></body></html>"""


def test_negative_control_flags_every_defect(browser, tmp_path: Path) -> None:
    page = tmp_path / "control.html"
    page.write_text(NEGATIVE_CONTROL.replace("{}", "x = 1  # " + "long " * 60))
    found = inspect_page(browser, page.as_uri())
    for kind in ("table", "dollar", "role", "js", "alt", "wide"):
        assert found[kind], f"the control page's {kind} defect was not detected: {found}"
    assert len(found["alt"]) == 2
