"""In-page explorers (loaded through ``sphinx.local_extensions``): the directive ``tpp-explorer``.

````md
```{tpp-explorer} decode
```
````

emits ``<form class="tpp-explorer" data-function="tpp.site.explorers.decode">`` with one labelled
``<select>`` per keyword parameter of the function, offering the values of its grid
(:data:`tpp.site.explorers.EXPLORERS`), and one ``<output name="ATTR">`` per result. At the end
of an HTML build the extension writes the data the page looks its numbers up in: the tables
:func:`tpp.site.explorers.tables` computes with the library (one small JavaScript file per split of
the grid, loaded when the reader selects it, so ``file://`` works: no ``fetch``), and the closed
forms :func:`tpp.site.explorers.closed_forms` prints with ``sympy.jscode``. The script and style are
``_static/explorers/explorers.js`` and ``explorers.css`` (no third-party code, no CDN).
"""

from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive

DATA_DIR = Path("_static") / "explorers" / "data"


def _explorers():
    from tpp.site import explorers

    return explorers


def render_form(name: str) -> str:
    """The explorer's HTML: a form of labelled selects and outputs (filled in by the script)."""
    ex = _explorers().EXPLORERS[name]
    uid = f"tpp-x-{name}"
    parts = [f'<form class="tpp-explorer" id="{uid}" data-explorer="{name}" '
             f'data-function="{ex.qualname}" data-split="{",".join(ex.split)}" '
             f'aria-label="{name} explorer: {html.escape(ex.function.__doc__.split(".")[0])}">',
             '<fieldset class="tpp-explorer-inputs"><legend>Inputs</legend>']
    for param, values in ex.options.items():
        kind = "str" if isinstance(values[0], str) else "int"
        opts = "".join(
            f'<option value="{html.escape(str(v))}"'
            f'{" selected" if v == ex.defaults[param] else ""}>{html.escape(str(v))}</option>'
            for v in values)
        parts.append(f'<label for="{uid}-{param}">{html.escape(ex.labels[param])}</label>'
                     f'<select id="{uid}-{param}" name="{param}" data-type="{kind}">'
                     f'{opts}</select>')
    parts.append("</fieldset>")
    parts.append('<p class="tpp-explorer-error" role="alert" hidden></p>')
    parts.append('<dl class="tpp-explorer-outputs" aria-live="polite">')
    for out, unit in ex.outputs.items():
        parts.append(f'<dt id="{uid}-o-{out}">{html.escape(ex.output_labels[out])}</dt>'
                     f'<dd><output name="{out}" data-unit="{unit}" '
                     f'aria-labelledby="{uid}-o-{out}">…</output></dd>')
    parts.append("</dl>")
    parts.append('<div class="tpp-explorer-chart" role="img" aria-label="chart of the outputs">'
                 '</div>')
    parts.append('<p class="tpp-explorer-source">Computed by <code>'
                 f'{ex.qualname}</code> at build time (tables it wrote; closed forms printed by '
                 'SymPy); no kernel, no network.</p>')
    parts.append("<noscript>This explorer needs JavaScript.</noscript></form>")
    return "".join(parts)


class ExplorerDirective(Directive):
    """``tpp-explorer NAME``: the form of explorer NAME (see the module docstring)."""

    required_arguments = 1
    has_content = False

    def run(self):
        name = self.arguments[0].strip()
        known = _explorers().EXPLORERS
        if name not in known:
            raise self.error(f"unknown explorer {name!r}: use one of {', '.join(known)}")
        return [nodes.raw("", render_form(name), format="html")]


def write_data(outdir: Path, names=None) -> dict[str, int]:
    """Write every data file of explorers ``names`` (default all) under ``outdir``; return the
    bytes of each file written (relative path -> size)."""
    ex = _explorers()
    target = Path(outdir) / DATA_DIR
    target.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name in names or ex.EXPLORERS:
        for key, tbl in ex.tables(name).items():
            fname = f"{name}-{key}.js" if key else f"{name}.js"
            body = json.dumps(tbl, separators=(",", ":"))
            text = ("window.TPP_EXPLORER_DATA=window.TPP_EXPLORER_DATA||{};"
                    f"window.TPP_EXPLORER_DATA[{json.dumps(f'{name}/{key}')}]={body};\n")
            (target / fname).write_text(text)
            sizes[str(DATA_DIR / fname)] = len(text.encode())
    forms = ex.closed_forms()
    funcs = ",".join(f"{json.dumps(k)}:function(P,M,v,t_F,t_B,t_W){{return {js};}}"
                     for k, js in forms.items())
    coll = ",".join(
        json.dumps(op) + ":{" + ",".join(
            f"{json.dumps(k)}:function(N,V,alpha,beta){{return {js};}}" for k, js in f.items())
        + "}" for op, f in ex.collective_forms().items())
    text = ("// printed by sympy.jscode from tpp.symbolic.pipeline.bubble_fraction and\n"
            "// tpp.symbolic.collectives.alpha_beta_time (tpp.site.explorers.closed_forms)\n"
            f"window.TPP_CLOSED_FORMS={{bubble_fraction:{{{funcs}}},collective:{{{coll}}}}};\n")
    (target / "closed-forms.js").write_text(text)
    sizes[str(DATA_DIR / "closed-forms.js")] = len(text.encode())
    return sizes


# --------------------------------------------------- the data, computed once per library version
# The tables take seconds (the memory explorer's 4,608 layouts use the planner's memory-only entry
# point, tpp.planner.memory_table, not the timed evaluate: bench/bench_explorers.py) and depend
# only on the library and this file: they are computed once per version of those, in a separate
# process started when the build starts (so that it runs beside the chapters' execution), kept in
# _build/.tpp_explorers/<hash>/ and copied into every HTML build of that version.
_BACKGROUND: dict[str, subprocess.Popen] = {}


def data_key() -> str:
    """A hash of what the data depend on: every file of the ``tpp`` package and this file."""
    # lib/tpp, found without importing tpp.site.explorers (a warm build may not need it)
    lib = Path(importlib.util.find_spec("tpp").origin).parent
    h = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(lib.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(str(path.relative_to(lib)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:20]


def _store(app) -> Path:
    return Path(app.outdir).parent / ".tpp_explorers"


def _start_data(app) -> None:
    """``builder-inited``: start computing the data of this library version if none is stored."""
    if app.builder.format != "html":
        return
    key = data_key()
    done = _store(app) / key
    if (done / "COMPLETE").exists() or key in _BACKGROUND:
        return
    staging = _store(app) / f"{key}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log = (staging / "log.txt").open("w")
    _BACKGROUND[key] = subprocess.Popen([sys.executable, __file__, str(staging)], stdout=log,
                                        stderr=subprocess.STDOUT, cwd=app.srcdir)


def _finish_data(app) -> Path:
    """The folder holding this version's data: waits for (or, if it failed, redoes in this
    process, so that its error stops the build) the computation started at ``builder-inited``."""
    key = data_key()
    store = _store(app)
    done = store / key
    if (done / "COMPLETE").exists():
        return done
    staging = store / f"{key}.partial"
    proc = _BACKGROUND.pop(key, None)
    if proc is None or proc.wait() != 0 or not (staging / DATA_DIR).is_dir():
        shutil.rmtree(staging, ignore_errors=True)
        write_data(staging)  # raises here, with the library's own error
    (staging / "COMPLETE").write_text(key + "\n")
    for old in store.iterdir():  # one version kept
        if old.name != f"{key}.partial":
            shutil.rmtree(old, ignore_errors=True)
    staging.rename(done)
    return done


def _build_finished(app, exc) -> None:
    if exc is not None or app.builder.format != "html":
        for proc in _BACKGROUND.values():
            proc.kill()
        return
    shutil.copytree(_finish_data(app) / DATA_DIR, Path(app.outdir) / DATA_DIR,
                    dirs_exist_ok=True)


def _page_context(app, pagename, templatename, context, doctree) -> None:
    # pydata-sphinx-theme logs "Got invalid theme mode: ." on a first visit when no default
    # mode is configured (its script reads an empty data-mode): give every page "auto".
    if not context.get("default_mode"):
        context["default_mode"] = "auto"
    if doctree is not None and any("tpp-explorer" in n.astext()
                                   for n in doctree.findall(nodes.raw)):
        app.add_js_file("explorers/data/closed-forms.js")
        app.add_js_file("explorers/explorers.js")
        app.add_css_file("explorers/explorers.css")


def setup(app):
    app.add_directive("tpp-explorer", ExplorerDirective)
    app.connect("builder-inited", _start_data)
    app.connect("html-page-context", _page_context)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # the background computation: python tpp_explorers.py FOLDER
    write_data(Path(sys.argv[1]))
