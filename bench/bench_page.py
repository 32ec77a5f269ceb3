"""Page weight and time to interactive of the pages that carry explorers (a benchmark, not a test).

For every built page with a ``form.tpp-explorer`` (``_build/html`` or TPP_SITE), in headless
Chromium with the network refused:

* weight: bytes of every resource the page loaded (HTML, scripts, styles, images, the explorers'
  data files), summed from the files on disk, and the explorers' share of it;
* time to interactive: milliseconds from navigation to every explorer showing numbers, beside the
  page's own ``load`` event (the ratio says what the explorers add);
* update: median milliseconds from a changed input to new numbers, over 20 changes.

    .venv/bin/python bench/bench_page.py [PAGE.html ...]
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("TPP_SITE", ROOT / "_build" / "html"))

READY = ("() => [...document.querySelectorAll('form.tpp-explorer')]"
         ".every(f => f.dataset.ready === '1')")
CHANGE = """async (i) => {
  const forms = [...document.querySelectorAll('form.tpp-explorer')];
  const f = forms[i % forms.length];
  const sels = [...f.querySelectorAll('select')];
  const s = sels[i % sels.length];
  s.selectedIndex = (s.selectedIndex + 1) % s.options.length;
  const t0 = performance.now();
  s.dispatchEvent(new Event('change', {bubbles: true}));
  while (f.dataset.ready !== '1') await new Promise(r => setTimeout(r, 1));
  return performance.now() - t0;
}"""


def _size(url: str) -> int:
    p = Path(unquote(urlparse(url).path))
    return p.stat().st_size if p.is_file() else 0


def bench(browser, page_path: Path) -> dict:
    ctx = browser.new_context(viewport={"width": 390, "height": 900})
    tab = ctx.new_page()
    requested: list[str] = []
    tab.on("request", lambda r: requested.append(r.url))
    tab.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
              else r.abort())
    tab.goto(page_path.as_uri(), wait_until="load")
    tab.wait_for_function(READY, timeout=120_000)
    tti = tab.evaluate("() => performance.now()")
    load = tab.evaluate("() => performance.getEntriesByType('navigation')[0].loadEventEnd")
    sizes = {u: _size(u) for u in dict.fromkeys(requested)}
    explorer = sum(s for u, s in sizes.items() if "/_static/explorers/" in u)
    changes = [tab.evaluate(CHANGE, i) for i in range(20)]
    data_after = sum(_size(u) for u in dict.fromkeys(requested) if "/explorers/data/" in u)
    ctx.close()
    return {"page": page_path.relative_to(HTML).as_posix(), "bytes": sum(sizes.values()),
            "explorer_bytes": explorer, "data_after_20_changes": data_after,
            "load_ms": load, "interactive_ms": tti, "update_ms": statistics.median(changes)}


def main(argv: list[str]) -> None:
    pages = [Path(a).resolve() for a in argv] or sorted(
        p for p in HTML.rglob("*.html") if 'class="tpp-explorer"' in p.read_text(errors="ignore"))
    if not pages:
        sys.exit(f"no page with an explorer under {HTML}: build the book first")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        print(f"{'page':36} {'weight':>9} {'explorers':>10} {'share':>6} {'load':>7} "
              f"{'TTI':>7} {'TTI/load':>8} {'update':>7}")
        for page in pages:
            r = bench(b, page)
            print(f"{r['page']:36} {r['bytes'] / 1e3:7.0f}kB {r['explorer_bytes'] / 1e3:8.0f}kB "
                  f"{r['explorer_bytes'] / r['bytes']:6.1%} {r['load_ms']:5.0f}ms "
                  f"{r['interactive_ms']:5.0f}ms {r['interactive_ms'] / r['load_ms']:8.2f} "
                  f"{r['update_ms']:5.1f}ms   (data loaded after 20 changes: "
                  f"{r['data_after_20_changes'] / 1e3:.0f} kB)")
        b.close()


if __name__ == "__main__":
    main(sys.argv[1:])
