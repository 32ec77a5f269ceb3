"""The memory explorer's table: :func:`tpp.planner.memory_table.evaluate_memory` (memory without
the step's timing) says what :func:`tpp.planner.evaluate` says about memory, layout by layout."""

from __future__ import annotations

import itertools
import random

import pytest
from tpp import models, planner
from tpp.costs import memory as cmem
from tpp.planner.memory_table import evaluate_memory
from tpp.site import explorer_functions, explorers

FIELDS = ("memory_bytes", "memory", "heaviest_rank", "layers", "microbatches", "capacity",
          "problems", "fits")


def _fields(est) -> dict:
    return {k: getattr(est, k) for k in FIELDS}


def _grid_sample(n: int, seed: int = 22):
    """``n`` layouts of the memory explorer's own grid, drawn at random (fixed seed)."""
    opts = explorers.EXPLORERS["memory"].options
    combos = list(itertools.product(*opts.values()))
    return [dict(zip(opts, c, strict=True)) for c in random.Random(seed).sample(combos, n)]


@pytest.mark.parametrize("values", _grid_sample(40), ids=lambda v: "-".join(map(str, v.values())))
def test_memory_only_equals_evaluate_on_the_explorers_grid(values):
    v = dict(values)
    m = models.model(v.pop("model"))
    seq_len, b = v.pop("seq_len"), v["microbatch_size"]
    lay = planner.Layout(**v)
    kw = dict(seq_len=seq_len, global_batch=lay.dp * b * 8)
    assert _fields(evaluate_memory(m, lay, **kw)) == _fields(planner.evaluate(m, lay, **kw))


CASES = [  # what the explorer's grid does not reach: CP, interleaving, HSDP, long M, options
    ("llama3_405b", dict(tp=8, cp=2, pp=8, dp=4, zero=1, recompute="full"),
     dict(seq_len=8192, global_batch=4 * 64)),
    ("llama2_70b", dict(tp=4, pp=4, virtual=2, dp=2, zero=2, recompute="none"),
     dict(seq_len=4096, global_batch=2 * 40)),
    ("llama2_70b", dict(tp=8, dp=16, zero=3, hsdp=True, recompute="selective"),
     dict(seq_len=4096, global_batch=64)),
    ("llama2_7b", dict(tp=2, pp=2, dp=2, zero=3, microbatch_size=2, sp=False),
     dict(seq_len=2048, global_batch=2 * 2 * 7, zero3_prefetch=3, grad_bytes=4,
          moment_dtype="bf16", master_weights=False)),
    ("llama2_7b", dict(tp=1, pp=4, dp=1, recompute="none"),
     dict(seq_len=2048, global_batch=64, attention="eager", dropout=True,
          runtime_reserve=False, gpu="a100_sxm_80gb")),
    ("llama2_70b", dict(tp=8, pp=4, dp=2, zero=2),             # Megatron's 5 % allowance
     dict(seq_len=4096, global_batch=2 * 8, fragmentation=cmem.MEGATRON_OVERHEAD)),
    ("llama2_7b", dict(tp=1, pp=8, dp=1, recompute="none"),   # M = 2 < P: fewer in flight
     dict(seq_len=2048, global_batch=2)),
    ("llama3_70b", dict(tp=16, pp=2, dp=1), dict(seq_len=4096, global_batch=8)),  # rejected
    ("llama2_70b", dict(tp=1, pp=1, dp=1), dict(seq_len=4096, global_batch=8)),   # too big
]


@pytest.mark.parametrize("name,lay,kw", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_memory_only_equals_evaluate_beyond_the_grid(name, lay, kw):
    m, layout = models.model(name), planner.Layout(**lay)
    mine, theirs = evaluate_memory(m, layout, **kw), planner.evaluate(m, layout, **kw)
    assert _fields(mine) == _fields(theirs)
    assert mine.step_time is None and mine.time == {}


def test_the_cases_reach_every_outcome():
    """The comparison above covers a rejected layout, one over memory and ones that fit."""
    outcomes = set()
    for name, lay, kw in CASES:
        est = evaluate_memory(models.model(name), planner.Layout(**lay), **kw)
        outcomes.add("rejected" if est.memory_bytes is None else "fits" if est.fits else "over")
    assert outcomes == {"rejected", "over", "fits"}


def test_bad_arguments_raise_what_evaluate_raises():
    m, lay = models.model("llama2_7b"), planner.Layout(tp=2)
    for kw in (dict(seq_len=0, global_batch=8), dict(seq_len=2048, global_batch=8,
                                                       zero3_prefetch=0),
               dict(seq_len=2048, global_batch=8, attention="sparse"),
               dict(seq_len=2048, global_batch=8, fragmentation=-0.1)):
        with pytest.raises(ValueError) as mine:
            evaluate_memory(m, lay, **kw)
        with pytest.raises(ValueError) as theirs:
            planner.evaluate(m, lay, **kw)
        assert str(mine.value) == str(theirs.value)


def test_the_explorer_reports_the_memory_only_numbers():
    out = explorer_functions.memory(model="llama2_70b", tp=8, pp=4, dp=8, zero=1,
                                    recompute="selective", seq_len=2048, microbatch_size=1)
    est = planner.evaluate(models.model("llama2_70b"),
                           planner.Layout(tp=8, pp=4, dp=8, zero=1, recompute="selective"),
                           seq_len=2048, global_batch=8 * 8)
    assert {k[len("memory."):]: v for k, v in out.items() if k.startswith("memory.")} \
        == est.memory
    assert (out["memory_bytes"], out["heaviest_rank"], out["layers"]) == (
        est.memory_bytes, est.heaviest_rank, est.layers)
