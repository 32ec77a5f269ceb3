"""Run a console script (``make book``: ``jupyter-book build``) without rfc3987_syntax.

jupyter-book imports jsonschema, whose format checkers import ``rfc3987_syntax`` when it is
installed (jupyter-events pulls it in for JupyterLab); that module compiles 39 Lark grammars at
import, 4-12 s of every build on these machines, for an ``iri`` format check the book's
configuration never asks for (jupyter-book validates ``_config.yml`` without format checks).
The stand-in of :mod:`tpp.site.build_kernel` (the one the build kernels and the grader use)
takes its place: the real module loads only if an ``iri`` check ever runs.

When the script exits, the exit handlers run and the output is flushed, and the process ends
without the interpreter's teardown (:func:`exit_now`): freeing Sphinx's environment and the
thousands of modules of a build took 1.4 s of every build, a tenth of a warm rebuild.

Usage: python _ext/quick_start.py .venv/bin/jupyter-book build . -W -n --keep-going
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import threading


def exit_now(code: object) -> None:
    """Leave as ``sys.exit(code)`` would, less the teardown of the interpreter: the threads
    joined and the ``atexit`` handlers run (logging's flush, multiprocessing's clean-up), the
    standard streams flushed, then ``os._exit`` with the same status."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter calls first
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)

if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: python _ext/quick_start.py SCRIPT [ARGS...]: name the console "
                         "script to run, e.g. .venv/bin/jupyter-book build .")
    from tpp.site.build_kernel import defer_rfc3987_syntax

    defer_rfc3987_syntax()
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exc:
        exit_now(exc.code)
    exit_now(0)
