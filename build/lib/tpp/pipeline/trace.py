"""Export a simulated timeline as Chrome trace JSON (open it in https://ui.perfetto.dev or
``chrome://tracing``; the "Trace Event Format" that PyTorch's pipelining schedule dump writes).

One process ("pipeline"), one thread per rank, one complete event (``"ph": "X"``) per operation,
named by its compact IR form (``0F1``, ``3F5&4B1``) with its kind as category.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tpp.pipeline.simulate import SimResult


def chrome_trace(result: SimResult, microseconds_per_unit: float = 1000.0) -> dict[str, Any]:
    """The trace as a dict: ``{"traceEvents": [...], "displayTimeUnit": "ms"}``.

    Simulated times are multiplied by ``microseconds_per_unit`` (the format counts in µs; the
    default shows one cost unit as one millisecond)."""
    if not microseconds_per_unit > 0:
        raise ValueError(
            f"microseconds_per_unit must be > 0 (got {microseconds_per_unit!r}): it converts "
            f"one simulated time unit into trace microseconds"
        )
    sched = result.schedule
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "tid": 0,
         "args": {"name": f"{sched.name} P={sched.ranks} M={sched.microbatches}"}},
    ]
    for r in range(sched.ranks):
        events.append({"name": "thread_name", "ph": "M", "pid": 0, "tid": r,
                       "args": {"name": f"rank {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": r,
                       "args": {"sort_index": r}})
    for r, a, s, e in sorted(result.timeline, key=lambda x: (x[0], x[2])):
        events.append({
            "name": str(a), "cat": a.kind, "ph": "X", "pid": 0, "tid": r,
            "ts": float(s) * microseconds_per_unit,
            "dur": float(e - s) * microseconds_per_unit,
        })
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(result: SimResult, path: str | Path,
                       microseconds_per_unit: float = 1000.0) -> Path:
    """Write :func:`chrome_trace` to ``path`` (JSON) and return the path."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(result, microseconds_per_unit)))
    return path
