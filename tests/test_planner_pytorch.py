"""The planner's in-flight count for Llama 3 405B against PyTorch's own interleaved schedule.

Dubey et al. 2024 (Sec. 3.3.2) ran an interleaved schedule modified to accept any number of
microbatches ("N" contiguous microbatches, Fig. 6) and do not state N. PyTorch 2.13's
``ScheduleInterleaved1F1B`` is such a schedule ("flex_pp": ``microbatches_per_round = M //
max(1, M // P)``); the order it builds is an implementation independent of the planner's memory
model, so the two counts of chunk activations held at the peak must agree.
"""

from __future__ import annotations

import re

import pytest
from tpp import models, planner
from tpp.costs import memory as cmem
from tpp.pipeline.pytorch import pytorch_order


def _peak_in_flight(row: list[str]) -> int:
    """Most forwards not yet matched by their backward along one rank's compute order."""
    held = peak = 0
    for action in row:
        kind = re.fullmatch(r"\d+([FBIW])\d+", action).group(1)
        held += {"F": 1, "B": -1, "I": -1, "W": 0}[kind]
        peak = max(peak, held)
    return peak


@pytest.mark.parametrize("key", ["llama3_405b_8k_8192", "llama3_405b_8k_16384"])
def test_planner_holds_what_pytorchs_flexible_interleaved_schedule_holds(torch, key):
    pub = planner.published(key)
    est = planner.evaluate_published(pub)
    lay, r = pub.layout, est.heaviest_rank
    per_chunk = est.layers[r] // lay.virtual * sum(cmem.model_activation_terms(
        models.model(pub.model), pub.seq_len, 1, lay.tp, True, "none").values())
    chunks, rest = divmod(est.memory["activations"], per_chunk)
    assert rest == 0, (est.memory["activations"], per_chunk)
    order = pytorch_order("interleaved", lay.pp, est.microbatches, lay.virtual)
    assert chunks == _peak_in_flight(order[r]), (chunks, r)
