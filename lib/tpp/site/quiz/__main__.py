"""``python -m tpp.site.quiz``: regenerate the graded master's question cells."""

from __future__ import annotations

from pathlib import Path

import nbformat

from tpp.site.quiz.render import sync_master

path = Path(__file__).resolve().parents[4] / "solutions" / "ex17_quiz.ipynb"
book = nbformat.read(path, as_version=4)
if sync_master(book):
    nbformat.write(book, path)
    print(f"wrote {path}; now run: tpp assign")
else:
    print(f"{path} is up to date")
