"""Plots of a simulated schedule: a Gantt chart and activations held over time (matplotlib)."""

from __future__ import annotations

from typing import Any

from tpp.pipeline.simulate import SimResult

COLORS: dict[str, str] = {"F": "#4C72B0", "B": "#55A868", "I": "#DD8452", "W": "#8172B3",
                          "F&B": "#C44E52"}
LABELS: dict[str, str] = {
    "F": "F forward",
    "B": "B backward",
    "I": "I input-gradient",
    "W": "W weight-gradient",
    "F&B": "F&B overlapped pair",
}


def gantt(
    result: SimResult,
    ax: Any = None,
    time_unit: str = "time units",
    title: str | None = None,
    show_microbatch: bool = True,
    show_stage: bool | None = None,
) -> Any:
    """Gantt chart of ``result``: one row per rank (rank 0 on top), one box per operation,
    coloured by kind (F, B, I, W), labelled with its microbatch (and, with interleaving, its
    stage as ``s:m``). Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 0.4 * result.ranks + 1.6))
    sched = result.schedule
    if show_stage is None:
        show_stage = sched.virtual > 1
    span = float(result.makespan) or 1.0
    kinds_used = set()
    for r, a, s, e in result.timeline:
        s, e = float(s), float(e)
        kinds_used.add(a.kind)
        ax.barh(r, e - s, left=s, height=0.8, color=COLORS[a.kind], edgecolor="white",
                linewidth=0.5)
        if show_microbatch and (e - s) / span > 0.012:
            if a.kind == "F&B":
                f, b = a
                label = (f"{f.stage}:{f.microbatch}&{b.stage}:{b.microbatch}" if show_stage
                         else f"{f.microbatch}&{b.microbatch}")
            else:
                label = f"{a.stage}:{a.microbatch}" if show_stage else str(a.microbatch)
            size = max(4.0, min(8.0, 500 * (e - s) / span / max(1, len(label))))
            ax.text((s + e) / 2, r, label, ha="center", va="center", fontsize=size, color="white")
    ax.set_ylim(result.ranks - 0.5, -0.5)
    ax.set_yticks(range(result.ranks))
    ax.set_yticklabels([f"rank {r}" for r in range(result.ranks)])
    ax.set_xlim(0, span)
    ax.set_xlabel(f"time ({time_unit})")
    ax.set_title(title or (
        f"{sched.name}: P={sched.ranks}, M={sched.microbatches}"
        + (f", v={sched.virtual}" if sched.virtual > 1 else "")
        + f", bubble {float(result.bubble_fraction):.1%} of rank-time"
    ))
    handles = [Patch(color=COLORS[k], label=LABELS[k]) for k in COLORS if k in kinds_used]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25 if result.ranks
              <= 4 else -0.12), ncol=len(handles), fontsize=8, frameon=False)
    return ax


def memory_plot(
    result: SimResult,
    ax: Any = None,
    ranks: list[int] | None = None,
    time_unit: str = "time units",
    release: str = "last",
    title: str | None = None,
) -> Any:
    """Activation sets held by each rank over time (a step plot per rank), see
    :meth:`SimResult.inflight_over_time`. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    ranks = list(range(result.ranks)) if ranks is None else ranks
    cmap = plt.get_cmap("viridis")
    for i, r in enumerate(ranks):
        times, counts = result.inflight_over_time(r, release)
        xs = [float(t) for t in times] + [float(result.makespan)]
        ys = counts + [counts[-1]]
        ax.step(xs, ys, where="post", color=cmap(i / max(1, len(ranks) - 1)), label=f"rank {r}")
    sched = result.schedule
    ax.set_xlabel(f"time ({time_unit})")
    unit = "stage-chunks" if sched.virtual > 1 else "microbatches"
    ax.set_ylabel(f"activations held ({unit})")
    ax.set_title(title or f"{sched.name}: activations held, P={sched.ranks}, "
                 f"M={sched.microbatches}")
    ax.set_xlim(0, float(result.makespan) or 1.0)
    ax.set_ylim(0, None)
    if len(ranks) <= 8:
        ax.legend(fontsize=8, ncol=2)
    return ax
