"""pytest set-up shared by every run (tests, chapters and solutions through nbmake).

Kernels started by nbmake inherit this environment: TPP_STATIC tells the chapters' widget cells
to run their explorer once at its defaults instead of starting live widgets, which can
deadlock nbclient (jupyter/nbclient#312). IPYTHONDIR points them at the course's IPython profile
(figures as SVG). The Makefile sets the same for the book build and `make lab`.
"""

import os
from pathlib import Path

os.environ.setdefault("TPP_STATIC", "1")
os.environ.setdefault("IPYTHONDIR", str(Path(__file__).resolve().parent / ".ipython"))

# Chapters: `make test` checks the book build's execution (jupyter-cache) when it is current
# instead of running them again (tests/nbcache.py).
pytest_plugins = ["tests.nbcache"]
