"""The in-page explorers: the library side, and every explorer on every built page in Chromium.

Library side (always runs): each form offers exactly the keyword parameters of its function and
only values the function accepts; the lookup the page does finds the function's own result; the
SymPy closed forms agree with the simulator where the chapters say they hold; the lab explorer
builds no widget without a front end.

Site side (reads ``_build/html`` or ``TPP_SITE``, like tests/test_site*.py; skips without a build
or a browser locally, fails under TPP_REQUIRE_SITE=1 / TPP_REQUIRE_BROWSER=1): every page whose
source carries a ``{tpp-explorer}`` must show it, and for many random input combinations drawn
from the page's own ``<option>``\\ s every ``<output data-value>`` equals ``FUNCTION(**inputs)``
(an invalid combination shows the function's own ``ValueError`` message); no request leaves the
site, no console error, no part of an explorer beyond a 390 px viewport.
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from tpp.site import explorers

ROOT = Path(__file__).resolve().parents[1]
HTML = Path(os.environ.get("TPP_SITE", ROOT / "_build" / "html"))
SAMPLES = int(os.environ.get("TPP_EXPLORER_SAMPLES", "12"))
REL = 1e-9  # the page stores floats to 12 significant digits


def _require(env: str, why: str) -> None:
    if os.environ.get(env) == "1":
        pytest.fail(why)
    pytest.skip(why)


def _expected(fn, inputs: dict) -> dict | str:
    try:
        return fn(**inputs)
    except ValueError as err:
        return str(err)


def _close(got: str | None, want) -> bool:
    if want is None:
        return got is None
    if got is None:
        return False
    return math.isclose(float(got), float(want), rel_tol=REL, abs_tol=1e-15)


# ------------------------------------------------------------------------------ library side
@pytest.mark.parametrize("name", list(explorers.EXPLORERS))
def test_inputs_are_the_functions_keyword_parameters(name: str) -> None:
    ex = explorers.EXPLORERS[name]
    params = inspect.signature(ex.function).parameters
    assert set(ex.options) <= set(params), set(ex.options) - set(params)
    sys.path.insert(0, str(ROOT / "_ext"))
    from tpp_explorers import render_form

    html = render_form(name)
    assert f'data-function="{ex.qualname}"' in html
    names = re.findall(r'<select id="[^"]+" name="([^"]+)"', html)
    assert names == list(ex.options)
    for param in names:  # every select has its label
        assert f'<label for="tpp-x-{name}-{param}">' in html
    outs = re.findall(r'<output name="([^"]+)"', html)
    assert outs == list(ex.outputs)


@pytest.mark.parametrize("name", list(explorers.EXPLORERS))
def test_every_offered_value_is_accepted_alone(name: str) -> None:
    """Each option, with the other inputs at their defaults, is a value the function takes
    (a ValueError about the combination is fine; a TypeError is not)."""
    ex = explorers.EXPLORERS[name]
    ok = 0
    for param, values in ex.options.items():
        for v in values:
            res = _expected(ex.function, {**ex.defaults, param: v})
            ok += isinstance(res, dict)
    assert ok > len(ex.options)  # most single changes from the defaults are valid


TABLED = [n for n in explorers.EXPLORERS if n != "collective"]


def _published_table(name: str, key: str) -> dict | None:
    """The table the book build wrote for this version of the library (its store
    ``_build/.tpp_explorers/<hash>``, see _ext/tpp_explorers.py: the very data the pages load),
    or ``None`` when there is none (no build, or the library changed since): then the test
    computes the table itself (seconds: planner.memory_table)."""
    sys.path.insert(0, str(ROOT / "_ext"))
    import tpp_explorers

    folder = ROOT / "_build" / ".tpp_explorers" / tpp_explorers.data_key()
    path = folder / tpp_explorers.DATA_DIR / (f"{name}-{key}.js" if key else f"{name}.js")
    if not (folder / "COMPLETE").exists() or not path.exists():
        return None
    return json.loads(path.read_text().split("]=", 1)[1].rstrip().rstrip(";"))


@pytest.mark.parametrize("name", TABLED)
def test_page_lookup_finds_the_functions_result(name: str) -> None:
    ex = explorers.EXPLORERS[name]
    rng = random.Random(19)
    tables = {}
    for _ in range(20):
        inputs = {k: rng.choice(v) for k, v in ex.options.items()}
        key = "-".join(str(inputs[k]) for k in ex.split)
        if key not in tables:
            tables[key] = _published_table(name, key) or explorers.table(
                name, **{k: inputs[k] for k in ex.split})
        row = explorers.lookup(tables[key], **inputs)
        want = _expected(ex.function, inputs)
        if isinstance(want, str):
            assert row == want
            continue
        for i, out in enumerate(ex.outputs):
            assert _close(None if row[i] is None else str(row[i]), want.get(out)), (inputs, out)


def test_decode_breakdown_adds_up_and_curve_marks_the_selection() -> None:
    r = explorers.decode(model="llama2_70b", tp=4, pp=2, batch=16, context_len=2048)
    parts = r["breakdown.weights"] + r["breakdown.allreduce"] + r["breakdown.bubble"]
    assert math.isclose(parts, r["step_time"], rel_tol=1e-12)
    assert r["scaling_curve"]["4"] == r["step_time"]
    assert r["breakdown.bubble"] > 0  # two stages, one group of requests: each waits


@pytest.mark.parametrize("name", explorers.CLOSED_FORM_SCHEDULES)
def test_closed_form_agrees_with_the_simulation(name: str) -> None:
    """Where the chapters' closed form applies, it equals the simulated bubble (it can fail:
    the closed form comes from tpp.symbolic, the bubble from the event simulator)."""
    checked = 0
    for P, M, v, t_w in [(4, 8, 1, 0), (2, 4, 2, 0), (4, 8, 2, 0), (4, 8, 1, 1), (8, 16, 2, 0)]:
        try:
            r = explorers.pipeline(name, P, M, v, t_f=1, t_b=2, t_w=t_w)
        except ValueError:
            continue
        if r["closed_form_bubble_fraction"] is None:
            continue
        assert math.isclose(r["closed_form_bubble_fraction"], r["bubble_fraction"],
                            rel_tol=1e-12), (P, M, v, t_w)
        checked += 1
    assert checked


def test_collective_closed_forms_agree_with_the_numeric_library() -> None:
    """The page's alpha-beta forms (SymPy, chapter 01) against tpp.collectives' numbers."""
    import sympy
    from tpp import hardware
    from tpp.symbolic import collectives as sc

    ex = explorers.EXPLORERS["collective"]
    forms = explorers.collective_forms()
    rng = random.Random(1)
    for _ in range(30):
        inputs = {k: rng.choice(v) for k, v in ex.options.items()}
        ln = hardware.link(inputs["link"])
        want = explorers.collective(**inputs)
        subs = {sc.N: inputs["n"], sc.V: inputs["payload_bytes"], sc.alpha: ln.latency,
                sc.beta: ln.bandwidth}
        for out, js in forms[inputs["op"]].items():
            expr = sympy.sympify(js.replace("Math.", ""), locals={"N": sc.N, "V": sc.V,
                                 "alpha": sc.alpha, "beta": sc.beta})
            assert math.isclose(float(expr.xreplace(subs)), want[out], rel_tol=1e-12), \
                (inputs, out)


def test_closed_forms_are_javascript_from_sympy() -> None:
    forms = explorers.closed_forms()
    assert set(forms) == set(explorers.CLOSED_FORM_SCHEDULES)
    assert "Math.max" in forms["zb-h1"]  # sympy.jscode printed the Max of the three paths
    assert "**" not in "".join(forms.values())


def test_lab_runs_once_without_a_front_end(monkeypatch, capsys) -> None:
    monkeypatch.delenv("TPP_STATIC", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.delenv("VSCODE_PID", raising=False)
    assert not explorers.has_frontend()
    assert explorers.lab("pipeline") is None
    assert "makespan: 33" in capsys.readouterr().out  # 1F1B, P=4, M=8: (M+P-1)(t_F+t_B)
    monkeypatch.setenv("JPY_SESSION_NAME", "chapters/09_interleaved.ipynb")
    assert explorers.has_frontend()


# --------------------------------------------------------------------------------- site side
def _explorer_pages() -> list[tuple[str, str]]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries):
        for e in entries or []:
            if "file" in e:
                files.append(e["file"])
            walk(e.get("sections"))

    for part in toc.get("parts", []):
        walk(part.get("chapters"))
    walk(toc.get("chapters"))
    found = []
    for page in files:
        src = next(ROOT.glob(page + ".*"), None)
        if src is None:
            continue
        for name in re.findall(r"\{tpp-explorer\}\s+(\w+)", src.read_text()):
            if (page, name) not in found:
                found.append((page, name))
    return found


READ = """form => {
  const out = {};
  form.querySelectorAll('output').forEach(o => out[o.name] = o.getAttribute('data-value'));
  const err = form.querySelector('.tpp-explorer-error');
  return {out, error: err.hidden ? null : err.textContent};
}"""
SET = """([form, values]) => {
  for (const [k, v] of Object.entries(values)) form.elements[k].value = String(v);
  form.elements[Object.keys(values)[0]].dispatchEvent(new Event('change', {bubbles: true}));
}"""
WIDE = """form => [form, ...form.querySelectorAll('*')]
  .map(e => [e.tagName + '.' + e.getAttribute('class'), e.getBoundingClientRect()])
  .filter(([, r]) => r.width > 0 && (r.right > window.innerWidth + 0.5 || r.left < -0.5))
  .map(([n, r]) => `${n} ${Math.round(r.left)}..${Math.round(r.right)}`)"""
OPTIONS = """form => Object.fromEntries([...form.querySelectorAll('select')].map(
  s => [s.name, [s.dataset.type, [...s.options].map(o => o.value)]]))"""


def test_every_explorer_source_page_is_known() -> None:
    """The site tests below cover every explorer the sources place (and some are placed)."""
    pages = _explorer_pages()
    names = {n for _, n in pages}
    assert names == set(explorers.EXPLORERS), names


def test_no_explorer_form_holds_math() -> None:
    """The forms are plain HTML: nothing in them for MathJax to typeset (which is why
    :func:`check_explorer` loads the pages without it)."""
    sys.path.insert(0, str(ROOT / "_ext"))
    from tpp_explorers import render_form

    for name in explorers.EXPLORERS:
        html = render_form(name)
        assert not re.search(r"\\[(\[]|\$", html), f"{name}'s form holds TeX: {html[:200]}"


def check_explorer(browser, html: Path, name: str, samples: int = SAMPLES) -> list[str]:
    """Drive explorer ``name`` of page ``html`` in Chromium at 390 px; return every problem."""
    problems: list[str] = []
    context = browser.new_context(viewport={"width": 390, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    outside: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    def route(r):
        if r.request.url.startswith("file:") and "/_static/mathjax/" in r.request.url:
            # the page's prose math is tests/test_site_pages.py's business; no form holds any
            # (test_no_explorer_form_holds_math): MathJax's typesetting, most of a chapter's
            # load here, is skipped (an empty script: no failed request, no console error)
            r.fulfill(status=200, content_type="text/javascript", body="")
        elif r.request.url.startswith("file:"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    tab.route("**/*", route)
    wait = "f => f.dataset.ready === '1'"
    try:
        tab.goto(html.as_uri(), wait_until="load", timeout=120_000)
        forms = tab.locator(f'form.tpp-explorer[data-explorer="{name}"]')
        if forms.count() < 1:
            return [f"no {name} explorer in {html.name}"]
        form = forms.first.element_handle()
        mod, _, attr = form.get_attribute("data-function").rpartition(".")
        fn = getattr(importlib.import_module(mod), attr)
        tab.wait_for_function(wait, arg=form, timeout=60_000)
        options = form.evaluate(OPTIONS)
        rng = random.Random(f"{html.name}/{name}")
        valid = 0
        for i in range(samples):
            inputs = {k: (int(rng.choice(v)) if t == "int" else rng.choice(v))
                      for k, (t, v) in options.items()}
            if i == 0:  # the page's defaults first
                inputs = dict(explorers.EXPLORERS[name].defaults)
            tab.evaluate(SET, [form, inputs])
            tab.wait_for_function(wait, arg=form, timeout=60_000)
            got = form.evaluate(READ)
            want = _expected(fn, inputs)
            if isinstance(want, str):
                if got["error"] != f"ValueError: {want}":
                    problems.append(f"{inputs}: shows {got['error']!r}, library says {want!r}")
                if any(v is not None for v in got["out"].values()):
                    problems.append(f"{inputs}: numbers shown for an invalid combination")
                continue
            valid += 1
            if got["error"] is not None:
                problems.append(f"{inputs}: error {got['error']!r} for a valid combination")
            for out, value in got["out"].items():
                if not _close(value, want.get(out)):
                    problems.append(f"{inputs}: {out} = {value} in the page, "
                                    f"{want.get(out)} in Python")
        if not valid:
            problems.append("no valid combination drawn from the page's options")
        # the explorer fits the phone's width (the page's own prose and math are
        # tests/test_site*.py's business): no part of the form right of the viewport
        wide = form.evaluate(WIDE)
        if wide:
            problems.append(f"explorer wider than 390 px: {wide[:3]}")
        # keyboard: a focused select changes with the arrow keys and the numbers follow
        first = form.query_selector("select")
        first.evaluate("s => { s.selectedIndex = 0; s.dispatchEvent("
                       "new Event('change', {bubbles: true})); }")
        tab.wait_for_function(wait, arg=form, timeout=60_000)
        first.focus()
        tab.keyboard.press("ArrowDown")
        tab.wait_for_function(wait, arg=form, timeout=60_000)
        if len(options[first.get_attribute("name")][1]) > 1 and \
                first.evaluate("s => s.selectedIndex") != 1:
            problems.append("the arrow key did not change the first input")
    finally:
        context.close()
    if outside:
        problems.append(f"requests left the site: {outside[:5]}")
    if errors:
        problems.append(f"console errors: {errors[:5]}")
    return problems


@pytest.mark.parametrize(("page", "name"), _explorer_pages())
def test_explorer_matches_its_function_in_the_page(browser, page: str, name: str) -> None:
    html = HTML / f"{page}.html"
    if not html.exists():
        _require("TPP_REQUIRE_SITE", f"{html} is not built: run `make book` first")
    problems = check_explorer(browser, html, name)
    assert not problems, "\n".join(problems[:10])


def _standalone_page(tmp: Path, names: list[str]) -> Path:
    """A page holding the explorers' forms, script, style and data, as the extension writes
    them (the control below needs no book build)."""
    sys.path.insert(0, str(ROOT / "_ext"))
    from tpp_explorers import render_form, write_data

    static = tmp / "_static" / "explorers"
    static.mkdir(parents=True)
    for f in ("explorers.js", "explorers.css"):
        shutil.copy(ROOT / "_static" / "explorers" / f, static / f)
    write_data(tmp, names)
    body = "".join(render_form(n) for n in names)
    page = tmp / "page.html"
    page.write_text(
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="_static/explorers/explorers.css">'
        '<script src="_static/explorers/data/closed-forms.js"></script>'
        '<script src="_static/explorers/explorers.js"></script>'
        f"</head><body><main>{body}</main></body></html>")
    return page


def test_control_page_passes_and_a_corrupted_table_is_caught(browser) -> None:
    """Positive and negative control of :func:`check_explorer` on a page built here: the page
    as written passes; the same page with one number of its table changed by 1 % fails."""
    with tempfile.TemporaryDirectory() as tmp:  # not tmp_path: /tmp/pytest-of-* is shared
        _control(browser, Path(tmp))


def _control(browser, tmp_path: Path) -> None:
    page = _standalone_page(tmp_path, ["layout", "collective"])
    assert check_explorer(browser, page, "layout", samples=6) == []
    assert check_explorer(browser, page, "collective", samples=6) == []
    data = tmp_path / "_static" / "explorers" / "data" / "layout.js"
    text = data.read_text()
    head, _, tail = text.partition('"rows":[[')
    first, _, rest = tail.partition(",")
    data.write_text(f'{head}"rows":[[{int(first) * 101 // 100 + 1},{rest}')  # gpus of row 0
    page_bad = _standalone_page(tmp_path / "bad", ["layout"])
    shutil.copy(data, tmp_path / "bad" / "_static" / "explorers" / "data" / "layout.js")
    ex = explorers.EXPLORERS["layout"]
    first_combo = {k: v[0] for k, v in ex.options.items()}
    problems = check_explorer(browser, page_bad, "layout", samples=1)
    assert problems == [], problems  # sample 0 is the defaults: not the corrupted row
    defaults = dict(ex.defaults)
    try:
        ex.defaults.clear()
        ex.defaults.update(first_combo)
        problems = check_explorer(browser, page_bad, "layout", samples=1)
    finally:
        ex.defaults.clear()
        ex.defaults.update(defaults)
    assert any("gpus" in p for p in problems), problems


@pytest.mark.parametrize("chapter", sorted(p.name for p in (ROOT / "chapters").glob("*.ipynb")))
def test_live_widgets_only_with_a_front_end(chapter: str) -> None:
    """Issue 21: `jupyter nbconvert --execute` (no TPP_STATIC) hung on chapters 06 and 09's live
    widgets. Every cell that builds `interact` widgets must take the headless branch when no
    front end is there (`tpp.site.explorers.has_frontend`), not only under TPP_STATIC."""
    import nbformat

    nb = nbformat.read(ROOT / "chapters" / chapter, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "widgets.interact" in cell.source:
            assert "has_frontend()" in cell.source, f"{chapter} cell {cell.get('id')}"
