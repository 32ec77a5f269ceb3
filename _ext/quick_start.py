"""Run a console script (``make book``: ``jupyter-book build``) without rfc3987_syntax.

jupyter-book imports jsonschema, whose format checkers import ``rfc3987_syntax`` when it is
installed (jupyter-events pulls it in for JupyterLab); that module compiles 39 Lark grammars at
import, 4-12 s of every build on these machines, for an ``iri`` format check the book's
configuration never asks for (jupyter-book validates ``_config.yml`` without format checks).
Marking the module absent makes jsonschema skip that checker (``with suppress(ImportError)``).

Usage: python _ext/quick_start.py .venv/bin/jupyter-book build . -W -n --keep-going
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit("usage: python _ext/quick_start.py SCRIPT [ARGS...]: name the console "
                         "script to run, e.g. .venv/bin/jupyter-book build .")
    sys.modules["rfc3987_syntax"] = None  # an import of it raises ImportError
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
