"""The two-stream Gantt chart of a :class:`tpp.data_parallel.overlap.StepTimeline` (matplotlib,
time in ms)."""

from __future__ import annotations

from typing import Any

from tpp.data_parallel.overlap.step import StepTimeline
from tpp.data_parallel.overlap.timeline import COMPUTE

__all__ = ["COLORS", "gantt"]

#: Colour of each kind of op.
COLORS: dict[str, str] = {"compute": "#4C72B0", "tp": "#DD8452", "cp": "#937860",
                          "pp": "#8172B3", "dp_grad": "#55A868", "dp_param": "#C44E52"}


def gantt(tl: StepTimeline, ax: Any = None, title: str | None = None) -> Any:
    """One row per stream (compute on top, then each link), one box per op, coloured by kind;
    compute ops slowed by contention are hatched. Time in milliseconds. Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not isinstance(tl, StepTimeline):
        raise ValueError("gantt takes the StepTimeline that "
                         "tpp.data_parallel.overlap.step_timeline returns")
    streams = [COMPUTE] + sorted(tl.link_busy)
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 0.5 * len(streams) + 1.4))
    used = set()
    span = float(tl.step_time) or 1.0
    for e in tl.events:
        if e.end <= e.start:
            continue
        y = streams.index(e.stream)
        stretched = e.stream == COMPUTE and (e.end - e.start) > e.op.duration * (1 + 1e-9)
        ax.barh(y, (e.end - e.start) * 1e3, left=e.start * 1e3, height=0.7,
                color=COLORS.get(e.kind, "grey"),
                edgecolor="white" if (e.end - e.start) > 0.01 * span else "none",
                linewidth=0.5,
                hatch="//" if stretched else None)
        used.add(e.kind)
    ax.set_yticks(range(len(streams)), streams)
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_xlim(0, tl.step_time * 1e3 * 1.01 or 1)
    ax.legend(handles=[Patch(color=COLORS[k], label=k) for k in COLORS if k in used],
              loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=6, fontsize="small",
              frameon=False)
    if title:
        ax.set_title(title)
    return ax
