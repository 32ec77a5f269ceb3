"""Hiding communication behind compute: a two-stream (compute, communication) timeline per rank.

The API the planner and the chapter "Hiding communication behind compute" use::

    from tpp.data_parallel.overlap import (step_timeline, DPTraffic, TPTraffic, CPTraffic,
                                           PPTraffic, Link)

    nic = Link.preset("ib_ndr", "nic")
    tl = step_timeline(t_fwd=[1e-3] * 8, t_bwd=[2e-3] * 8, microbatches=4,
                       dp=DPTraffic(stage=0, group_size=64, layer_bytes=400_000_000, link=nic))
    tl.step_time, tl.exposed["dp_grad"], tl.contention, tl.events

* :mod:`.timeline`: the engine (ops on streams, links shared by name, compute slowed while a
  collective runs) and the decomposition of the step into compute, exposed communication per
  kind, contention and idle time;
* :mod:`.traffic`: the communication of each kind (DP/ZeRO/FSDP, TP, CP, PP) with alpha-beta
  times from :mod:`tpp.collectives` and :mod:`tpp.costs`;
* :mod:`.step`: :func:`step_timeline` places that traffic as DDP, FSDP, Megatron's distributed
  optimizer, TP (blocking or decomposed), ring attention and pipeline p2p place it;
* :mod:`.contention`: the SM-contention default and its sources;
* :mod:`.plots`: the two-stream Gantt chart (time in ms).

The exposed communication of a bucketed all-reduce behind a backward of ``L`` equal layers is
derived in :mod:`tpp.symbolic.overlap` and checked against this timeline.
"""

from tpp.data_parallel.overlap.contention import NCCL_SM_SLOWDOWN, sm_share
from tpp.data_parallel.overlap.step import KINDS, StepTimeline, rank_schedule, step_timeline
from tpp.data_parallel.overlap.timeline import COMPUTE, Event, Op, Run, run
from tpp.data_parallel.overlap.traffic import (
    DDP_BUCKET_BYTES,
    CPTraffic,
    DPTraffic,
    Link,
    PPTraffic,
    TPTraffic,
)

__all__ = [
    "COMPUTE", "DDP_BUCKET_BYTES", "KINDS", "NCCL_SM_SLOWDOWN", "CPTraffic", "DPTraffic",
    "Event", "Link", "Op", "PPTraffic", "Run", "StepTimeline", "TPTraffic", "rank_schedule",
    "run", "sm_share", "step_timeline",
]
