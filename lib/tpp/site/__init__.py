"""What the book's pages compute and ask without a kernel: the explorers and the self-checks.

Not a part of the book but a layer across all of them: every part's chapters embed explorers
and check-yourself questions, and the Sphinx side (``_ext/tpp_explorers.py``,
``_ext/tpp_quiz.py``) renders what these modules define. Keeping it out of the parallelism
packages keeps those free of page concerns (JSON tables, HTML, widgets).

- :mod:`.explorer_functions` — the thin functions each explorer calls (decode step, pipeline
  schedule, memory per GPU, rank map, ZeRO traffic, a collective's alpha-beta time).
- :mod:`.explorers` — the contract with the page: each explorer's inputs and outputs, the JSON
  tables written at build time, the SymPy closed forms printed as JavaScript, the lab widget.
- :mod:`.quiz` — the check-yourself questions: one source for the pages' self-checks and the
  graded quiz notebook (``python -m tpp.site.quiz`` regenerates its question cells).
"""
