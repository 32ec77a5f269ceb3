"""The book build's pre-execution (_ext/tpp_execute.py): what it spares, the order it runs in."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))

import tpp_execute  # noqa: E402

_DEFERRED_THEN_REAL = """
import sys
from tpp.site.build_kernel import defer_rfc3987_syntax
assert defer_rfc3987_syntax()
import jsonschema, nbformat  # nbformat's validator imports jsonschema's format checkers
assert type(sys.modules["rfc3987_syntax"]).__name__ == "_Deferred", sys.modules["rfc3987_syntax"]
check = jsonschema.Draft7Validator({"format": "iri"},
                                   format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
assert check.is_valid("https://example.org/a?b#c") and not check.is_valid("no iri")
assert type(sys.modules["rfc3987_syntax"]).__name__ == "module"  # the real one, now loaded
assert not defer_rfc3987_syntax()  # imported already: left alone
print("ok")
"""


def test_the_deferred_rfc3987_syntax_loads_at_its_first_use_and_checks_the_same():
    """The stand-in changes nothing: jsonschema's ``iri`` check still accepts an IRI and refuses
    a non-IRI, through the real module, which loads at that first check."""
    run = subprocess.run([sys.executable, "-c", _DEFERRED_THEN_REAL], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_the_build_kernels_start_with_the_deferral(tmp_path):
    """A kernel started by the pre-execution has the stand-in before any cell runs, and a
    chapter's glue still works in it."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import sys\nfrom myst_nb import glue\nglue('x', 42, display=False)\n"
        "print(type(sys.modules.get('rfc3987_syntax')).__name__)")])
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    _path, text, _s, tb = tpp_execute.execute_one(str(path), 120, False)
    assert tb is None, tb
    outputs = nbformat.reads(text, as_version=4).cells[0].outputs
    assert [o["text"].strip() for o in outputs if o["output_type"] == "stream"] == ["_Deferred"]
    glued = [o for o in outputs if o.get("metadata", {}).get("scrapbook", {}).get("name") == "x"]
    assert len(glued) == 1


def test_the_order_of_a_fresh_build_knows_every_chapter():
    """_ext/execution_seconds.json names every chapter notebook (a fresh clone has no cache
    records: without an estimate a new chapter would be scheduled as if it took no time)."""
    table = json.loads(tpp_execute.ESTIMATES.read_text(encoding="utf8"))
    chapters = {p.relative_to(ROOT).as_posix() for p in (ROOT / "chapters").glob("*.ipynb")}
    assert set(table) == chapters
    assert all(t > 0 for t in table.values())
    estimates = tpp_execute.estimated_seconds(ROOT)
    slowest = max(estimates, key=estimates.get)
    assert Path(slowest).is_file() and estimates[slowest] == max(table.values())


def test_the_build_kernels_get_one_blas_thread_unless_one_is_chosen():
    """OPENBLAS_NUM_THREADS=1 for the kernels of the build, a value set by the user kept."""
    env: dict[str, str] = {}
    tpp_execute.single_threaded_blas(env)
    assert env == {"OPENBLAS_NUM_THREADS": "1"}
    env = {"OPENBLAS_NUM_THREADS": "2"}
    tpp_execute.single_threaded_blas(env)
    assert env == {"OPENBLAS_NUM_THREADS": "2"}


def test_the_wheel_is_built_while_the_book_builds_and_packed_at_the_end(tmp_path):
    """_ext/course_download.py: builder-inited starts the wheel in a thread (none when this
    library's wheel is stored), build-finished waits for it and packs the zip with it."""
    import types
    import zipfile

    import course_download

    app = types.SimpleNamespace(srcdir=str(ROOT), outdir=str(tmp_path / "html"),
                                builder=types.SimpleNamespace(format="html", name="html"))
    course_download.start_wheel(app)
    thread = course_download._BACKGROUND.get("wheel")
    assert thread is not None
    course_download.write_course_zip(app, None)
    assert not thread.is_alive() and "wheel" not in course_download._BACKGROUND
    names = zipfile.ZipFile(tmp_path / "html" / course_download.ZIP_NAME).namelist()
    assert f"{course_download.FOLDER}/{course_download.wheel_name(ROOT)}" in names
    course_download.start_wheel(app)  # stored now: nothing to build
    assert "wheel" not in course_download._BACKGROUND


def test_pre_execution_caches_one_notebook_here_and_several_in_workers(tmp_path, monkeypatch):
    """pre_execute stores what it executed in jupyter-cache, where myst-nb then finds it: one
    notebook from the calling process; several in two workers, each waited for when Sphinx
    reads it (source-read), the other pages read first; a failing one is left to myst-nb."""
    import types

    from jupyter_cache import get_cache

    monkeypatch.setenv("TPP_BUILD_JOBS", "2")
    sources = {"one": "print(1)", "two": "print(2)", "three": "print(3)",
               "bad": "raise RuntimeError('boom')"}
    for name, source in sources.items():
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]),
                       tmp_path / f"{name}.ipynb")
    (tmp_path / "page.md").write_text("# A page\n")
    config = types.SimpleNamespace(
        execution_mode="cache", execution_cache_path=str(tmp_path / "cache"),
        execution_excludepatterns=[], execution_in_temp=False, execution_timeout=120,
        execution_allow_errors=False)
    env = types.SimpleNamespace(mystnb_config=config, doc2path=lambda doc: str(
        tmp_path / (f"{doc}.md" if doc == "page" else f"{doc}.ipynb")))
    app = types.SimpleNamespace(srcdir=str(tmp_path), env=env)
    cache = get_cache(config.execution_cache_path)

    def cached(name: str) -> str | None:
        nb = nbformat.read(tmp_path / f"{name}.ipynb", as_version=4)
        try:
            record = cache.match_cache_notebook(nb)
        except KeyError:
            return None
        return cache.get_cache_bundle(record.pk).nb.cells[0].outputs[0]["text"]

    tpp_execute.pre_execute(app, env, ["one"])
    assert cached("one") == "1\n" and not tpp_execute._RUN
    docnames = ["bad", "one", "page", "three", "two"]
    tpp_execute.pre_execute(app, env, docnames)  # "one" is cached: nothing to execute for it
    assert docnames[:2] == ["one", "page"] and sorted(docnames[2:]) == ["bad", "three", "two"]
    for doc in docnames:  # what Sphinx does next: source-read, then myst-nb looks in the cache
        tpp_execute.await_notebook(app, doc, [""])
        if doc != "page":
            assert cached(doc) == (None if doc == "bad" else f"{sources[doc][6]}\n")
    assert not tpp_execute._RUN  # the workers are stopped after the last notebook


def test_the_download_page_is_read_again_only_when_the_set_of_notebooks_changes():
    """_ext/course_download.py: an edit of a chapter leaves the page that counts the notebooks
    alone (env-get-outdated), a notebook added or removed makes it outdated."""
    import types

    import course_download

    names = course_download.notebook_names(ROOT)
    assert "chapters/01_collectives.ipynb" in names
    assert any(n.startswith("exercises/") for n in names)
    env = types.SimpleNamespace(srcdir=str(ROOT), tpp_download_pages={"intro": list(names)})
    assert course_download.outdated_pages(None, env, set(), set(), set()) == []
    env.tpp_download_pages["chapters/exercises"] = names[:-1]  # read when one was missing
    assert course_download.outdated_pages(None, env, set(), set(), set()) == [
        "chapters/exercises"]
    course_download.purge_page(None, env, "chapters/exercises")
    assert list(env.tpp_download_pages) == ["intro"]


_GRADER_PROCESS = """
import sys
import tpp.grading.grade, tpp.grading.kernelspec, tpp.grading.assign  # what a grading process loads
from tpp.grading.example import write_demo_master
from tpp.grading.notebook import parse_master
import pathlib, tempfile
master = parse_master(write_demo_master(pathlib.Path(tempfile.mkdtemp())))  # nbformat validates it
print(type(sys.modules["rfc3987_syntax"]).__name__)
"""


def test_the_grader_processes_defer_it_too():
    """Every process that grades (``tpp grade``, its worker processes) imports ``tpp.grading``
    before nbformat: the package defers rfc3987_syntax, and reading a master still works."""
    run = subprocess.run([sys.executable, "-c", _GRADER_PROCESS], capture_output=True,
                         text=True, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.strip() == "_Deferred", run.stderr


def test_a_warm_rebuilds_one_edited_notebook_starts_at_config_inited(tmp_path, monkeypatch):
    """early_start (config-inited) executes the one notebook edited since the last build that
    has no cache record, in a thread; pre_execute takes it as started and the page that waits
    for it is read last; nothing starts without an earlier build or with two to execute."""
    import os
    import types

    from jupyter_cache import get_cache

    monkeypatch.setenv("TPP_BUILD_JOBS", "2")
    (tmp_path / "doctrees").mkdir()
    pickled = tmp_path / "doctrees" / "environment.pickle"
    for name in ("one", "two", "three"):
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
            f"print({name!r})")]), tmp_path / f"{name}.ipynb")
    pickled.write_bytes(b"")
    past = pickled.stat().st_mtime - 10
    for name in ("two", "three"):  # unchanged since the last build
        os.utime(tmp_path / f"{name}.ipynb", (past, past))
    os.utime(tmp_path / "one.ipynb", (past + 20, past + 20))  # edited after it
    config = types.SimpleNamespace(
        nb_execution_mode="cache", nb_execution_cache_path=str(tmp_path / "cache"),
        nb_execution_excludepatterns=[], nb_execution_in_temp=False, nb_execution_timeout=120,
        nb_execution_allow_errors=False, external_site_map={"one": 1, "two": 2, "three": 3})
    nb_config = types.SimpleNamespace(**{k[3:]: v for k, v in vars(config).items()
                                         if k.startswith("nb_")})
    env = types.SimpleNamespace(mystnb_config=nb_config,
                                doc2path=lambda doc: str(tmp_path / f"{doc}.ipynb"))
    app = types.SimpleNamespace(srcdir=str(tmp_path), doctreedir=str(tmp_path / "doctrees"),
                                outdir=str(tmp_path / "html"), env=env)
    cache = get_cache(config.nb_execution_cache_path)

    tpp_execute.early_start(app, config)
    assert list(tpp_execute._EARLY["futures"]) == [str(tmp_path / "one.ipynb")]
    docnames = ["one", "three", "two"]
    tpp_execute.pre_execute(app, env, docnames)
    assert docnames == ["three", "two", "one"] and not tpp_execute._EARLY
    for doc in docnames:
        tpp_execute.await_notebook(app, doc, [""])
    assert not tpp_execute._RUN
    record = cache.match_cache_notebook(nbformat.read(tmp_path / "one.ipynb", as_version=4))
    assert cache.get_cache_bundle(record.pk).nb.cells[0].outputs[0]["text"] == "one\n"

    for name in ("two", "three"):  # two edited notebooks to execute: left to pre_execute
        os.utime(tmp_path / f"{name}.ipynb", (past + 20, past + 20))
    tpp_execute.early_start(app, config)
    assert not tpp_execute._EARLY
    pickled.unlink()  # no earlier build (a fresh clone): left to pre_execute
    os.utime(tmp_path / "three.ipynb", (past, past))
    tpp_execute.early_start(app, config)
    assert not tpp_execute._EARLY
