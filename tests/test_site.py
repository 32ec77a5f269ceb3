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


def _visible_text(html: str) -> str:
    """The page's text as a reader sees it (no scripts, styles or tags)."""
    html = re.sub(r"<!--.*?-->", " ", html, flags=re.S)
    html = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", html, flags=re.S | re.I)
    import html as entities

    return entities.unescape(re.sub(r"<[^>]+>", " ", html))


def test_no_page_publishes_a_placeholder_for_evidence_it_did_not_run(site: Path) -> None:
    """`make book` installs torch and runs everything: no "(not run…)" and no "SKIPPED" in the
    prose or any output (code inputs aside: a fallback branch is code, not a published result)."""
    offenders = {}
    for page in sorted(site.rglob("*.html")):
        html = page.read_text(errors="replace")
        # a code cell's input (its source, not a result) is where a fallback may be written
        html = re.sub(r'<div class="highlight-ipython3 notranslate">.*?</pre>', " ", html,
                      flags=re.S)
        text = _visible_text(html)
        # the placeholders' forms: "(not run)", "(not run: torch missing)", "SKIPPED (no torch)"
        hits = re.findall(r".{0,60}(?:\(not run[:)]|\bSKIPPED\b).{0,60}", text)
        if hits:
            offenders[str(page.relative_to(site))] = hits[:3]
    assert not offenders, f"pages with placeholders instead of results: {offenders}"


# --------------------------------------------------------------------------- the course download
def _course_zip(site: Path) -> Path:
    path = site / "tpp-course.zip"
    assert path.is_file(), "make book did not write tpp-course.zip next to the pages"
    return path


def test_the_course_download_holds_every_notebook_and_the_wheel(site: Path) -> None:
    import zipfile

    with zipfile.ZipFile(_course_zip(site)) as zf:
        names = set(zf.namelist())
        wheels = [n for n in names if n.endswith(".whl")]
        assert len(wheels) == 1, f"one tpp wheel expected in the zip, found {wheels}"
        for folder in ("chapters", "exercises"):
            wanted = {f"tpp-course/{folder}/{p.name}" for p in (ROOT / folder).glob("*.ipynb")}
            assert wanted and wanted <= names, f"missing from the zip: {sorted(wanted - names)}"
        readme = zf.read("tpp-course/README.txt").decode()
        assert wheels[0].split("/")[-1] in readme and "jupyter lab" in readme
        nb = zf.read("tpp-course/chapters/01_collectives.ipynb")
        assert b'"outputs": []' in nb or b'"outputs":[]' in nb


def test_the_pages_link_the_download_with_the_two_lines(site: Path) -> None:
    for page in ("intro.html", "chapters/exercises.html"):
        html = (site / page).read_text(errors="replace")
        links = re.findall(r'href="([^"]*tpp-course\.zip)"', html)
        assert links, f"{page} does not link the course's download"
        assert (site / page).parent.joinpath(links[0]).resolve() == _course_zip(site).resolve()
        text = _visible_text(html)
        assert re.search(r"pip\s+install\s+\S*tpp-\S+\.whl", text), f"{page}: no install line"
        assert re.search(r"jupyter\s+lab", text), f"{page}: no line that opens the course"


def test_the_downloaded_wheel_installs_in_a_fresh_venv_and_imports_tpp(site: Path, tmp_path):
    import sys
    import zipfile

    with zipfile.ZipFile(_course_zip(site)) as zf:
        zf.extractall(tmp_path)
    wheel = next((tmp_path / "tpp-course").glob("tpp-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        packed = {n for n in zf.namelist() if n.endswith(".py")}
    source = {p.relative_to(ROOT / "lib").as_posix() for p in (ROOT / "lib" / "tpp").rglob("*.py")}
    assert source <= packed, f"modules missing from the wheel: {sorted(source - packed)}"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    out = subprocess.run([str(python), "-c", "import tpp; print(tpp.__file__, tpp.__version__)"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    where, version = out.stdout.split()
    assert Path(where).is_relative_to(venv), f"tpp imported from {where}, not the fresh venv"
    assert version in wheel.name


def test_no_repository_buttons_are_promised_without_a_repository(site: Path) -> None:
    """The site speaks of a repository (buttons, issues) only when repository.url is set."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = (config.get("repository") or {}).get("url") or ""
    text = _visible_text((site / "intro.html").read_text(errors="replace"))
    if url:
        assert url in text
    else:
        assert "buttons at the top" not in text
        assert "github.com/executablebooks" not in (site / "intro.html").read_text()


def test_the_map_lists_every_chapter(site: Path) -> None:
    html = (site / "intro.html").read_text(errors="replace")
    start = html.index('class="tpp-map')
    block = html[start:html.index("</ul>", start)]
    missing = [p for p in _toc_pages()[1:] if f'href="{p}.html' not in block]
    assert not missing, f"the intro's map misses {missing}"


# --------------------------------------------------------------------------- code on the pages
def _fold_code():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fold_code", ROOT / "_ext" / "fold_code.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fold_rules_fold_plotting_formatting_and_set_up_but_not_derivation():
    fc = _fold_code()
    plot = "fig, ax = plt.subplots()\nax.plot(x, y)\nax.set_xlabel('N (ranks)')\nplt.show()"
    assert fc.fold_reason(plot) == "plotting"
    table = 'rows = ["| a | b |", "|---|---|"]\nrows += [f"| {a} | {b} |" for a, b in x]\n' \
            'display(Markdown("\\n".join(rows)))'
    assert fc.fold_reason(table) == "formatting"
    assert fc.fold_reason("import numpy as np\nimport sympy as sp") == "set-up"
    assert fc.fold_reason("widgets.interact(explore, P=widgets.IntSlider())") == "widget"
    # the agreement and the derivation stay visible, even next to a plot
    assert fc.fold_reason(plot + "\nassert bubble == closed") is None
    assert fc.fold_reason("N = sp.symbols('N')\nexpr = sp.simplify(2 * (N - 1) / N)") is None
    assert fc.fold_reason("res = pp.simulate(sched, t_f=1, t_b=2)\nprint(res.makespan)") is None


# Code lines a reader sees on each chapter's page (cells neither folded behind "show code" nor
# removed), measured after _ext/fold_code.py (2026-12-01: 72 in chapter 08 to 468 in chapter 06,
# was 75 to 579), with ~10 % headroom. Chapters 05 (the SwiGLU/GQA block of issue 18) and 14
# (rebuilt on the published runs) were re-measured after their merge: 218 and 258. Derivation
# Chapter 14 grew again with issue 18's Llama 3 memory and hold-out sections (311, bound 340);
# 13b (hiding communication) shows 200. Derivation
# and simulation stay visible, so a chapter of long derivations (06) or the errata's calculators
# show more. A chapter not listed: at most 300.
VISIBLE_CODE_BOUND = {
    "01_collectives": 180, "02_tp_mlp": 230, "03_f_and_g": 230, "04_tp_attention": 110,
    "05_sequence_parallelism": 240, "06_tp_cost": 520, "07_gpipe": 140, "08_1f1b": 80,
    "09_interleaved": 170, "10_zero_bubble": 150, "11_pp_cost": 140, "12_v_shapes": 140,
    "13_data_parallel": 160, "13b_hiding_communication": 220, "14_composition": 340,
    "15_context_parallel": 200,
    "16_expert_parallel": 130, "17_serving": 430, "18_real_engine": 250, "appendix_errata": 460,
}


@pytest.mark.parametrize("chapter", sorted(p.stem for p in (ROOT / "chapters").glob("*.ipynb")))
def test_visible_code_per_chapter_stays_under_its_bound(chapter):
    fc = _fold_code()
    path = ROOT / "chapters" / f"{chapter}.ipynb"
    pending = fc.fold(path, write=False)
    assert not pending, (f"{chapter}: cells the rules fold are visible {pending}: run "
                         f"`python _ext/fold_code.py chapters/{chapter}.ipynb`")
    shown = fc.visible_code_lines(path)
    bound = VISIBLE_CODE_BOUND.get(chapter, 300)
    assert shown <= bound, f"{chapter}: {shown} visible code lines > {bound}"
