"""The instructor's grader: ``tpp assign`` (solutions -> exercises) and ``tpp grade``.

Modules, one idea each:

- :mod:`tpp.grading.notebook`  — the exercise-notebook format: parse and validate a master.
- :mod:`tpp.grading.assign`    — generate the learner's notebook from a master, check drift.
- :mod:`tpp.grading.serialise` — the grader cell that serialises answer values in the kernel.
- :mod:`tpp.grading.compare`   — decode those values and compare them with the reference.
- :mod:`tpp.grading.run`       — run a rebuilt notebook in a fresh, resource-limited kernel.
- :mod:`tpp.grading.grade`     — grade a folder: rows, feedback, ``results.json``, gradebook.
- :mod:`tpp.grading.checks`    — small helpers for the check cells of a master.

This ``__init__`` imports nothing heavy on purpose: the kernel launcher and the check
helpers must start fast.
"""

from tpp.site.build_kernel import defer_rfc3987_syntax

# nbformat's validator imports jsonschema, whose format checkers import rfc3987_syntax (2 s of
# CPU building parsers, for an "iri" check the grader never runs) in every process that grades:
# the grader, each of its worker processes, every `tpp grade`. Deferred here, before any module
# of this package imports nbformat (see tpp.site.build_kernel).
defer_rfc3987_syntax()
