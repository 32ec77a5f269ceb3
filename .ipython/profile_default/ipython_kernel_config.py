# The course's IPython profile (the Makefile and conftest.py point IPYTHONDIR here).
# Figures are drawn as SVG: sharp on a high-density screen and in the PDF.
c = get_config()  # noqa: F821
c.InlineBackend.figure_formats = {"svg"}
