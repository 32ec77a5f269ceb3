"""pytest set-up shared by every run (tests, chapters and solutions through nbmake).

Kernels started by nbmake inherit this environment: TPP_STATIC tells the chapters' widget cells
to run their explorer once at its defaults instead of starting live widgets, which can
deadlock nbclient (jupyter/nbclient#312). The Makefile sets the same for the book build.
"""

import os

os.environ.setdefault("TPP_STATIC", "1")
