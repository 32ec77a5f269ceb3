"""Pipeline parallelism: a schedule IR, builders, a validator, an event simulator and plots.

>>> from tpp import pipeline
>>> s = pipeline.schedule("1f1b", ranks=4, microbatches=8)
>>> [str(a) for a in s.actions[3][:3]]
['3F0', '3B0', '3F1']
>>> pipeline.simulate(s, t_f=1, t_b=2).makespan
33

Conventions (the chapters and :mod:`tpp.symbolic.pipeline` use the same):

* indices are 0-based: global stage ``s`` (on rank ``s mod P``), microbatch ``m``;
* costs ``t_f``, ``t_b``, ``t_w`` are per stage, i.e. per model chunk with interleaving (a rank
  with v chunks spends ``v * t_f`` on one microbatch's forward); ``t_b`` is the input-gradient
  time (op I), ``t_w`` the weight-gradient time (op W) and a full backward B costs
  ``t_b + t_w``;
* ``bubble_fraction`` = idle share of total rank-time, ``bubble_ratio`` = idle / busy;
* ``peak_inflight[r]``: most activation sets (one stage, one microbatch) held at once by rank r,
  from the start of F to the end of B (or of W when split; ``peak_inflight_until("I")`` frees
  at the end of I instead).

Closed forms (uniform costs, free transfers), checked exactly by the tests: GPipe and 1F1B
``(M + P - 1)(t_f + t_b)``; interleaved ``(v M + P - 1)(t_f + t_b)`` (M a multiple of P);
ZB-H1 ``M (t_f + t_b + t_w) + (P - 1) max(t_f + t_b - t_w, t_b, t_f)`` for M >= P (any M:
``tpp.symbolic.pipeline.zb_h1_makespan_any_m``).
"""

from tpp.pipeline.builders import (
    BUILDERS,
    SCHEDULES,
    _registry,
    gpipe,
    interleaved,
    naive,
    one_f_one_b,
    schedule,
    zb_h1,
)
from tpp.pipeline.dualpipe import dualpipe
from tpp.pipeline.ir import KINDS, Action, Overlap, Schedule, parse_action
from tpp.pipeline.looped import looped_bfs, zb1p
from tpp.pipeline.simulate import SimResult, simulate
from tpp.pipeline.trace import chrome_trace, write_chrome_trace
from tpp.pipeline.v_shapes import dualpipev, zb_h2, zbv
from tpp.pipeline.validate import dependencies, validate

BUILDERS.update(_registry())

__all__ = [
    "Action",
    "BUILDERS",
    "KINDS",
    "Overlap",
    "chrome_trace",
    "dualpipe",
    "dualpipev",
    "looped_bfs",
    "write_chrome_trace",
    "zb1p",
    "zb_h2",
    "zbv",
    "SCHEDULES",
    "Schedule",
    "SimResult",
    "dependencies",
    "gantt",
    "gpipe",
    "interleaved",
    "memory_plot",
    "naive",
    "one_f_one_b",
    "parse_action",
    "schedule",
    "simulate",
    "validate",
    "zb_h1",
]


def __getattr__(name: str):  # plots import matplotlib lazily
    if name in ("gantt", "memory_plot"):
        from tpp.pipeline import plots

        return getattr(plots, name)
    raise AttributeError(name)
