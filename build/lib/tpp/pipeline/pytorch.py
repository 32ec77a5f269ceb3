"""PyTorch's own per-rank orders, read from ``torch.distributed.pipelining`` (optional extra).

The schedule classes of PyTorch 2.13 only read ``num_stages``, ``group_size``, ``group_rank`` and
``submod`` from their stage objects while building ``pipeline_order`` (rank -> actions, ``None``
for an idle slot), so :func:`pytorch_order` builds them on CPU with stand-in stages and no process
group. The orders are compared with ours in ``tests/test_pipeline_torch.py``.
"""

from __future__ import annotations

from typing import Any

# our name -> (PyTorch class name, placement of a rank's stages)
PYTORCH_SCHEDULES: dict[str, tuple[str, str]] = {
    "gpipe": ("ScheduleGPipe", "single"),
    "1f1b": ("Schedule1F1B", "single"),
    "interleaved": ("ScheduleInterleaved1F1B", "loop"),
    "looped-bfs": ("ScheduleLoopedBFS", "loop"),
    "zb1p": ("ScheduleInterleavedZeroBubble", "loop"),
    "zbv": ("ScheduleZBVZeroBubble", "v"),
    "dualpipev": ("ScheduleDualPipeV", "v"),
}


class StandInStage:
    """What a PyTorch schedule reads from a pipeline stage while it builds its order."""

    def __init__(self, stage_index: int, num_stages: int, group_size: int, group_rank: int,
                 submod: Any) -> None:
        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_size = group_size
        self.group_rank = group_rank
        self.submod = submod
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1


def pytorch_schedule(name: str, ranks: int, microbatches: int, virtual: int = 1) -> Any:
    """The PyTorch schedule object for our schedule ``name`` (needs torch)."""
    import torch
    from torch.distributed.pipelining import schedules

    if name not in PYTORCH_SCHEDULES:
        raise ValueError(f"PyTorch 2.13 does not build {name!r}: use one of "
                         f"{', '.join(PYTORCH_SCHEDULES)}")
    cls_name, style = PYTORCH_SCHEDULES[name]
    cls = getattr(schedules, cls_name)
    P, S = ranks, ranks * virtual
    mod = torch.nn.Identity()
    if style == "single":
        return cls(StandInStage(0, S, P, 0, mod), microbatches)
    idx = [0, 2 * P - 1] if style == "v" else list(range(0, S, P))
    return cls([StandInStage(i, S, P, 0, mod) for i in idx], microbatches)


def expand_pytorch_row(row: list[Any]) -> list[str]:
    """Compute actions of one rank as compact strings: idle slots and non-compute actions
    (REDUCE_GRAD, ...) dropped, an OVERLAP_F_B replaced by its sub-actions."""
    out: list[str] = []
    for a in row:
        if a is None:
            continue
        if a.sub_actions is not None:
            out.extend(str(x) for x in a.sub_actions)
        elif a.computation_type.value in ("F", "B", "I", "W"):
            out.append(str(a))
    return out


def pytorch_order(name: str, ranks: int, microbatches: int, virtual: int = 1) -> list[list[str]]:
    """PyTorch's per-rank compute order for ``name`` (overlapped pairs expanded)."""
    sched = pytorch_schedule(name, ranks, microbatches, virtual)
    return [expand_pytorch_row(sched.pipeline_order[r]) for r in range(ranks)]
