"""The chapters executed in parallel before Sphinx reads them (issue 22).

With ``execute_notebooks: cache`` myst-nb executes each notebook when Sphinx reads it, one after
another, and stores the executed notebook in jupyter-cache. At ``env-before-read-docs`` this
extension executes, in ``TPP_BUILD_JOBS`` worker processes (default: the CPUs this process may
use), every notebook about to be read that has no cache record for its current code, with the
call myst-nb makes (``jupyter_cache.executors.utils.single_nb_execution``: the notebook's folder
as working directory, the configured timeout and ``allow_errors``), and stores each execution
that succeeded as myst-nb would (``cache_notebook_bundle(..., check_validity=False)``). myst-nb
then reads them from the cache ("Using cached notebook"). Sphinx does not wait for all of them:
it reads the other pages first and the notebooks in the order they were started, and at each
notebook's ``source-read`` (before myst-nb looks it up) :func:`await_notebook` waits for that
one execution, so that Sphinx parses the finished chapters while the others still execute.
A notebook whose execution failed is not stored: myst-nb executes it again when it reads it and
fails the strict build with its traceback, exactly as without this extension.
``TPP_BUILD_JOBS=1`` leaves all execution to myst-nb. A single notebook to execute (a warm
rebuild after one chapter's edit) runs from the Sphinx process itself, with the same kernel as
in a worker; it starts at ``config-inited`` (:func:`early_start`), in a thread of the Sphinx
process, while Sphinx loads its pickled environment and sets up the builder (1-2 s of a warm
rebuild that no longer come before the chapter's execution).

The longest executions go first (their last recorded ``execution_seconds``; on a fresh clone,
with no record yet, the seconds measured for the course in ``_ext/execution_seconds.json``), so
that the slowest chapter does not start last.

Two imports are spared per execution: the workers and the kernels they start would each import
``rfc3987_syntax`` (2 s of CPU: see :mod:`tpp.site.build_kernel`); the workers defer it
(:func:`worker_init`) and the kernels load ``tpp.site.build_kernel`` as an IPython extension
(:data:`KERNEL_ARGS`), which defers it the same way, without changing what any cell computes.

The kernels run NumPy's BLAS on one thread (``OPENBLAS_NUM_THREADS=1`` unless set: see
:func:`single_threaded_blas`): with the chapters executed side by side on all CPUs, BLAS threads
only compete with the other notebooks, and the simulated ranks (``tpp.collectives.spmd`` runs
them as Python threads) each calling a threaded BLAS spent 2-10 times the CPU of one thread. It
also makes the rounding-level numbers a chapter prints (e.g. chapter 02's 1e-16 errors)
independent of the machine's core count, by which a threaded BLAS splits a product.
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from fnmatch import fnmatch
from multiprocessing import get_context
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

# the kernel's command line: the extension that defers rfc3987_syntax (tpp.site.build_kernel)
KERNEL_ARGS = ["--IPKernelApp.extra_extensions=tpp.site.build_kernel"]
# seconds each notebook took, for the order of a build that has no cache records yet
ESTIMATES = Path(__file__).with_name("execution_seconds.json")


def jobs() -> int:
    """Worker processes: ``TPP_BUILD_JOBS``, else the CPUs this process may run on."""
    value = os.environ.get("TPP_BUILD_JOBS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"TPP_BUILD_JOBS={value!r}: set a whole number of processes >= 1 "
                             "(1 = no parallel execution)")
        return int(value)
    from tpp.hardware import cpu_count

    return cpu_count()


BLAS_THREADS = {"OPENBLAS_NUM_THREADS": "1"}


def single_threaded_blas(environ=os.environ) -> None:
    """Kernels started from here on (they inherit ``environ``) use one BLAS thread, unless the
    variable is set already."""
    for key, value in BLAS_THREADS.items():
        environ.setdefault(key, value)


def worker_init() -> None:
    """A worker's start: ``rfc3987_syntax`` deferred before nbformat imports jsonschema."""
    from tpp.site.build_kernel import defer_rfc3987_syntax

    defer_rfc3987_syntax()


def execute_one(path: str, timeout: int | None, allow_errors: bool):
    """Worker: execute the notebook at ``path`` in its folder; returns
    ``(path, executed notebook as JSON or None, seconds, traceback or None)``."""
    import nbformat
    from jupyter_cache.executors.utils import single_nb_execution
    from myst_nb.core.read import standard_nb_read

    nb = standard_nb_read(Path(path).read_text(encoding="utf8"))
    result = single_nb_execution(nb, cwd=str(Path(path).parent), timeout=timeout,
                                 allow_errors=allow_errors, meta_override=True,
                                 extra_arguments=KERNEL_ARGS)
    if result.err is not None:
        return path, None, result.time, result.exc_string
    return path, nbformat.writes(nb), result.time, None


def _last_seconds(cache) -> dict[str, float]:
    """The last recorded execution time of each notebook (by path) in the cache."""
    seconds: dict[str, float] = {}
    for record in sorted(cache.list_cache_records(), key=lambda r: r.created):
        t = (record.data or {}).get("execution_seconds")
        if t is not None:
            seconds[record.uri] = float(t)
    return seconds


def estimated_seconds(srcdir: Path) -> dict[str, float]:
    """``_ext/execution_seconds.json`` (``{"chapters/NN_x.ipynb": seconds}``) as absolute paths;
    empty if the file is missing or unreadable (then the order is alphabetical)."""
    try:
        table = json.loads(ESTIMATES.read_text(encoding="utf8"))
    except (OSError, ValueError):
        return {}
    return {str(Path(srcdir) / rel): float(t) for rel, t in table.items()}


def _to_execute(app, env, docnames) -> list[Path]:
    """The notebooks among ``docnames`` that myst-nb would execute now (no cache match)."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import standard_nb_read

    config = env.mystnb_config
    cache = get_cache(config.execution_cache_path)
    todo = []
    for docname in sorted(docnames):
        path = Path(env.doc2path(docname))
        if path.suffix != ".ipynb" or any(fnmatch(str(path), p)
                                          for p in config.execution_excludepatterns):
            continue
        nb = standard_nb_read(path.read_text(encoding="utf8"))
        try:
            cache.match_cache_notebook(nb)
        except KeyError:
            todo.append(path)
    return todo


_RUN: dict = {}  # the pool's run in progress: its futures by path, the store, counts
_EARLY: dict = {}  # the execution started at config-inited: its thread pool and future by path


def _changed_notebook(app, config) -> Path | None:
    """The one notebook of the book's table of contents changed since the last build (newer
    than its pickled environment) that has no cache record for its code, else ``None`` (none,
    several, or more than 4 changed files or no earlier build: all left to
    :func:`pre_execute`)."""
    from jupyter_cache import get_cache
    from myst_nb.core.read import standard_nb_read

    site_map = getattr(config, "external_site_map", None)
    pickled = Path(app.doctreedir) / "environment.pickle"
    if site_map is None or not pickled.is_file():
        return None
    since = pickled.stat().st_mtime
    changed = [path for path in (Path(app.srcdir) / f"{doc}.ipynb" for doc in site_map)
               if path.is_file() and path.stat().st_mtime > since
               and not any(fnmatch(str(path), p) for p in config.nb_execution_excludepatterns)]
    if not changed or len(changed) > 4:
        return None
    cache = get_cache(config.nb_execution_cache_path
                      or Path(app.outdir).parent.joinpath(".jupyter_cache").resolve())
    unmatched = []
    for path in changed:
        try:
            cache.match_cache_notebook(standard_nb_read(path.read_text(encoding="utf8")))
        except KeyError:
            unmatched.append(path)
    return unmatched[0] if len(unmatched) == 1 else None


def early_start(app, config) -> None:
    """``config-inited`` (after sphinx-external-toc has read the table of contents): a warm
    rebuild's one edited notebook starts executing now, in a thread (the kernel is its own
    process; the thread waits on it), instead of at ``env-before-read-docs``.
    :func:`pre_execute` then takes it as started; its result is stored as any other."""
    if config.nb_execution_mode != "cache" or config.nb_execution_in_temp or jobs() < 2 \
            or getattr(app, "parallel", 0) > 1:
        return
    path = _changed_notebook(app, config)
    if path is None:
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tpp-execute")
    _EARLY.update(pool=pool, start=time.perf_counter(), futures={str(path): pool.submit(
        execute_one, str(path), config.nb_execution_timeout, config.nb_execution_allow_errors)})
    logger.info(f"[tpp_execute] executing {os.path.relpath(path, app.srcdir)} (started before "
                "the environment is loaded)")


def pre_execute(app, env, docnames) -> None:
    """``env-before-read-docs``: start executing the notebooks to be read, in parallel, into the
    cache, and read the other documents first, the notebooks in the order they were started
    (``docnames`` is reordered in place); :func:`await_notebook` waits for each one's execution
    when Sphinx comes to read it, so that Sphinx reads and parses while the rest execute."""
    config = getattr(env, "mystnb_config", None)
    n_jobs = jobs()
    if config is None or config.execution_mode != "cache" or n_jobs < 2 or \
            config.execution_in_temp:
        return
    todo = _to_execute(app, env, docnames)
    early = _EARLY.pop("futures", {})
    if not todo and not early:
        return
    import nbformat
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(config.execution_cache_path)
    last = estimated_seconds(app.srcdir) | _last_seconds(cache)
    todo.sort(key=lambda p: -last.get(str(p), 0.0))
    workers = min(n_jobs, len(todo))
    failed: list[str] = []

    def store(result) -> None:
        path, text, seconds, _tb = result
        rel = os.path.relpath(path, app.srcdir)
        if text is None:
            failed.append(rel)
            logger.info(f"[tpp_execute] {rel}: failed after {seconds:.1f} s (myst-nb runs "
                        "it again and reports the error)")
            return
        cache.cache_notebook_bundle(
            CacheBundleIn(nbformat.reads(text, as_version=4), path,
                          data={"execution_seconds": seconds}),
            check_validity=False, overwrite=True)
        logger.info(f"[tpp_execute] {rel}: executed in {seconds:.1f} s")

    args = (config.execution_timeout, config.execution_allow_errors)
    if early:  # started at config-inited (early_start): awaited at its source-read
        rest = [p for p in todo if str(p) not in early]
        _RUN.update(start=_EARLY.pop("start"), n=len(early) + len(rest), failed=failed,
                    workers=1, pool=_EARLY.pop("pool"), store=store, futures=early)
        pending = [d for d in docnames if str(env.doc2path(d)) in early]
        docnames[:] = [d for d in docnames if str(env.doc2path(d)) not in early] + pending
        for path in rest:  # a notebook that changed otherwise (rare): executed here meanwhile
            store(execute_one(str(path), *args))
        return
    logger.info(f"[tpp_execute] executing {len(todo)} notebooks in {workers} processes")
    _RUN.update(start=time.perf_counter(), n=len(todo), failed=failed, workers=workers)
    if workers == 1 or getattr(app, "parallel", 0) > 1:
        # one notebook (a warm rebuild after an edit): executed from this process, whose imports
        # are done, with the same kernel as in a worker (KERNEL_ARGS), instead of by myst-nb;
        # with Sphinx's own parallel reading (-j) the readers are forked: all done here first
        if workers == 1:
            store(execute_one(str(todo[0]), *args))
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                     initializer=worker_init) as pool:
                for future in as_completed([pool.submit(execute_one, str(p), *args)
                                            for p in todo]):
                    store(future.result())
        _log_total()
        return
    # spawn: a clean interpreter per worker (no copy of Sphinx's state, no forked threads)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                               initializer=worker_init)
    _RUN.update(pool=pool, store=store,
                futures={str(p): pool.submit(execute_one, str(p), *args) for p in todo})
    order = {str(p): i for i, p in enumerate(todo)}
    pending = sorted((d for d in docnames if str(env.doc2path(d)) in order),
                     key=lambda d: order[str(env.doc2path(d))])
    docnames[:] = [d for d in docnames if str(env.doc2path(d)) not in order] + pending


def await_notebook(app, docname: str, source) -> None:
    """``source-read``: before myst-nb looks the notebook up in the cache, its execution ends
    and is stored (a notebook not executed here passes through)."""
    futures = _RUN.get("futures", {})
    future = futures.pop(str(app.env.doc2path(docname)), None)
    if future is not None:
        _RUN["store"](future.result())
    if "pool" in _RUN and not futures:
        finish(app)


def finish(app, *_args) -> None:
    """All executions stored and the workers stopped (also at ``env-updated`` and
    ``build-finished``, should a document never have been read)."""
    pool = _RUN.pop("pool", None)
    if pool is None:
        return
    for future in _RUN.pop("futures", {}).values():
        if not future.cancel():
            _RUN["store"](future.result())
    pool.shutdown()
    _log_total()


def _log_total() -> None:
    failed = _RUN["failed"]
    logger.info(f"[tpp_execute] {_RUN['n'] - len(failed)} of {_RUN['n']} notebooks executed "
                f"in {time.perf_counter() - _RUN['start']:.1f} s ({_RUN['workers']} processes)")
    _RUN.clear()


def setup(app):
    single_threaded_blas()  # for every kernel of the build: the workers' and myst-nb's own
    # after myst-nb's own set-up (it creates env.mystnb_config at builder-inited)
    app.connect("config-inited", early_start, priority=900)  # after external_site_map is set
    app.connect("env-before-read-docs", pre_execute)
    app.connect("source-read", await_notebook)
    app.connect("env-updated", finish)
    app.connect("build-finished", finish)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
