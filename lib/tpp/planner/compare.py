"""Every published run of :mod:`tpp.planner.published`, predicted by :func:`evaluate` with the
planner's defaults (plus the run's own software choices: attention kernel, DP and TP overlap)
against what its source measured: :func:`compare_published`, :func:`error_summary`.

Nothing here is fitted: the component figures come from :mod:`tpp.hardware` and
:mod:`tpp.costs.compute`, each with its source. The hold-out runs (``holdout=True``, Megatron-LM's
H100 table) were added after those were settled and are reported apart.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from tpp import models
from tpp.planner.estimate import Estimate, evaluate
from tpp.planner.layout import Layout
from tpp.planner.published import PUBLISHED, Published

__all__ = ["Comparison", "compare_published", "error_summary", "evaluate_published"]


@dataclass(frozen=True)
class Comparison:
    """One published run: its estimate and the measured and predicted seconds per step."""

    published: Published
    estimate: Estimate
    measured: float

    @property
    def predicted(self) -> float:
        return self.estimate.step_time

    @property
    def ratio(self) -> float:
        """predicted / measured step time (> 1: the planner is pessimistic)."""
        return self.predicted / self.measured

    @property
    def error(self) -> float:
        """``|predicted / measured - 1|``."""
        return abs(self.ratio - 1)


def evaluate_published(pub: Published, layout: Layout | None = None,
                       **evaluate_kw) -> Estimate:
    """:func:`evaluate` of the published run ``pub`` with the settings of its source (GPU,
    sequence, batch, attention kernel, DP and TP overlap, network, gradient bytes), on its own
    layout or on ``layout`` (e.g. the same run at another interleaving depth); ``evaluate_kw``
    override those settings."""
    if not isinstance(pub, Published):
        raise ValueError("pub must be a tpp.planner.Published: use tpp.planner.published(key)")
    kw = dict(gpu=pub.gpu, seq_len=pub.seq_len, global_batch=pub.global_batch,
              attention_kernel=pub.attention, dp_overlap=pub.dp_overlap,
              attention="eager" if pub.attention == "eager" else "flash",
              inter_link=pub.inter_link, grad_bytes=pub.grad_bytes,
              tp_comm_overlap=pub.tp_comm_overlap)
    kw.update(evaluate_kw)
    return evaluate(models.model(pub.model), pub.layout if layout is None else layout, **kw)


def compare_published(keys: list[str] | None = None, *, holdout: bool = False,
                      **evaluate_kw) -> list[Comparison]:
    """Predicted against measured for the runs ``keys``; by default every run of
    :data:`PUBLISHED` that is not a hold-out (``holdout=True``: the hold-out runs,
    :data:`tpp.planner.published.HOLDOUT`, reported apart).

    ``evaluate_kw`` go to :func:`evaluate` (e.g. ``mfu=0.4`` for the old flat model)."""
    if not isinstance(holdout, bool):
        raise ValueError(f"holdout={holdout!r} must be True or False")
    if keys is None:
        keys = [k for k, p in PUBLISHED.items() if p.holdout == holdout]
    out = []
    for key in keys:
        if key not in PUBLISHED:
            raise ValueError(f"unknown published run {key!r}: use one of {', '.join(PUBLISHED)}")
        pub = PUBLISHED[key]
        est = evaluate_published(pub, **evaluate_kw)
        if est.step_time is None:
            raise ValueError(f"{key}: the planner cannot time this run: {est.problems}")
        out.append(Comparison(pub, est, pub.measured_step_time(est.model_flops_per_step)))
    return out


def error_summary(rows: list[Comparison]) -> tuple[float, float]:
    """(median, worst) of ``|predicted / measured - 1|`` over ``rows``."""
    if not rows:
        raise ValueError("no comparisons: pass at least one published run")
    errs = [r.error for r in rows]
    return statistics.median(errs), max(errs)
