"""The schedules' names and the rules every builder checks before it builds.

One place for both, so that the builders (:mod:`tpp.pipeline.builders`,
:mod:`tpp.pipeline.looped`, :mod:`tpp.pipeline.v_shapes`, :mod:`tpp.pipeline.dualpipe`) import
it and none of them imports another for a check.
"""

from __future__ import annotations

__all__ = ["SCHEDULES", "MULTI_CHUNK", "check_common"]

SCHEDULES: tuple[str, ...] = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1", "looped-bfs",
                              "zb1p", "zb-h2", "zbv", "dualpipev", "dualpipe")
MULTI_CHUNK: tuple[str, ...] = ("interleaved", "looped-bfs", "zb1p", "zbv", "dualpipev")


def check_common(name: str, ranks: int, microbatches: int, virtual: int) -> None:
    """P, M and v must be ints >= 1; ``virtual`` must be 1 unless ``name`` places several chunks
    per rank (:data:`MULTI_CHUNK`)."""
    for label, value in (("ranks", ranks), ("microbatches", microbatches), ("virtual", virtual)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{label} must be an int (got {value!r}): pass a whole number")
        if value < 1:
            raise ValueError(f"{label} must be >= 1 (got {value}): use at least 1")
    if name not in MULTI_CHUNK and virtual != 1:
        raise ValueError(
            f"{name} uses one stage per rank, so virtual must be 1 (got {virtual}): "
            f"use name='interleaved' for virtual stages"
        )
