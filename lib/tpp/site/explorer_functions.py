"""What each in-page explorer and lab widget computes: thin functions over the library.

Each function takes the explorer's inputs as keyword arguments and returns a flat ``dict`` of
numbers in the library's units (bytes, seconds, fractions; pipeline times in the units of the
costs), plus a few lists the page draws (a Gantt chart, a curve, a rank map). They are thin: the
arithmetic lives where it always lives —

* :func:`decode`: :func:`tpp.serving.deployment.serving_layout` (itself
  :func:`tpp.serving.decode_step` per stage and :func:`tpp.serving.deployment.decode_rounds` for
  the pipeline);
* :func:`pipeline`: :func:`tpp.pipeline.schedule` and :func:`tpp.pipeline.simulate`, and the
  closed form :func:`tpp.symbolic.pipeline.bubble_fraction` where the chapters derive one;
* :func:`memory`: the planner's memory, :func:`tpp.planner.memory_table.evaluate_memory` (the
  memory half of :func:`tpp.planner.evaluate`, from the same functions, without timing the
  step: the heaviest pipeline rank, term by term, with the library's layer placement
  :func:`tpp.planner.layers_per_chunk`);
* :func:`layout`: :class:`tpp.planner.Layout` (rank map, groups, nodes spanned);
* :func:`collective`: :func:`tpp.collectives.alpha_beta_time` (the page evaluates chapter 01's
  SymPy forms instead, :func:`collective_forms`, and the tests compare the two);
* :func:`zero_traffic`: :mod:`tpp.costs.zero` (model states and bytes sent per rank).

A bad combination raises the library's own ``ValueError``; the page shows its message. The
contract with the page (which inputs each form offers, which outputs it shows) is
:mod:`tpp.site.explorers`.
"""

from __future__ import annotations

from typing import Any

import sympy

from tpp import models
from tpp import pipeline as tpp_pipeline
from tpp import planner as tpp_planner
from tpp.planner.memory_table import evaluate_memory
from tpp.serving import deployment
from tpp.symbolic import pipeline as sym_pipeline

__all__ = ["CLOSED_FORM_SCHEDULES", "DECODE_TP", "decode", "pipeline", "memory", "layout",
           "zero_traffic", "collective", "collective_forms"]

CLOSED_FORM_SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")

DECODE_TP = (1, 2, 4, 8)
"""The TP degrees the decode explorer offers (and draws its scaling curve over)."""


# ------------------------------------------------------------------------------------- decode
def decode(model: str = "llama2_70b", tp: int = 8, pp: int = 1, interconnect: str = "nvlink4",
           gpu: str = "h100_sxm", batch: int = 16, context_len: int = 0) -> dict[str, Any]:
    """One decode step (one token for each of ``batch`` sequences) of ``model`` on ``tp`` x ``pp``
    GPUs: :func:`tpp.serving.deployment.serving_layout` with one group of requests
    (``microbatches=1``), TP over ``interconnect``, the pipeline's hops over InfiniBand NDR (its
    default).

    Returns ``weight_bytes_per_gpu``, ``memory_bytes_per_gpu`` (weights + KV cache), ``fits``,
    ``step_time`` (seconds between two tokens of a sequence), ``scaling_efficiency``
    (``T(TP=1) / (tp T(tp))`` at the same PP), ``allreduce_bytes_per_gpu`` (bytes one GPU sends
    in its all-reduces per step), the breakdown of a step from one GPU's view
    (``breakdown.weights`` reading weights and KV cache, ``breakdown.allreduce``,
    ``breakdown.bubble`` idle while other stages work; they add up to ``step_time``),
    ``bubble_fraction``, ``scaling_curve`` (TP -> step time, the degrees of the page) and
    ``strip`` (each stage's busy interval within one step).
    """
    lay = deployment.serving_layout(model, tp, pp, batch=batch, microbatches=1,
                                    interconnect=interconnect, accelerator=gpu,
                                    context_len=context_len)
    st = lay.stage

    def step_at(t: int) -> float:
        return deployment.serving_layout(model, t, pp, batch=batch, microbatches=1,
                                         interconnect=interconnect, accelerator=gpu,
                                         context_len=context_len).round_time

    curve = {}
    for t in DECODE_TP:
        try:
            curve[str(t)] = step_at(t)
        except ValueError:
            curve[str(t)] = None
    one = step_at(1)
    strip = [[s * (st.step_time + lay.p2p_time), s * (st.step_time + lay.p2p_time) + st.step_time]
             for s in range(pp)]
    return {
        "weight_bytes_per_gpu": st.weight_bytes_per_gpu,
        "memory_bytes_per_gpu": lay.memory_bytes_per_gpu,
        "gpu_memory_bytes": st.gpu_memory_bytes,
        "fits": lay.fits,
        "step_time": lay.round_time,
        "tokens_per_second": lay.tokens_per_second,
        "scaling_efficiency": one / (tp * lay.round_time),
        "allreduce_bytes_per_gpu": st.allreduce_sent_per_gpu * lay.microbatches,
        "breakdown.weights": st.work_time * lay.microbatches,
        "breakdown.allreduce": st.allreduce_time * lay.microbatches,
        "breakdown.bubble": lay.round_time - lay.microbatches * st.step_time,
        "bubble_fraction": lay.bubble_fraction,
        "stage_time": st.step_time,
        "p2p_time": lay.p2p_time,
        "scaling_curve": curve,
        "strip": strip,
    }


# ----------------------------------------------------------------------------------- pipeline
def pipeline(schedule: str = "1f1b", ranks: int = 4, microbatches: int = 8, virtual: int = 1,
             t_f: int = 1, t_b: int = 2, t_w: int = 0) -> dict[str, Any]:
    """Simulate schedule ``schedule`` (a name of :data:`tpp.pipeline.SCHEDULES`) on P = ``ranks``
    with M = ``microbatches`` and v = ``virtual``: :func:`tpp.pipeline.schedule` then
    :func:`tpp.pipeline.simulate` with per-stage costs ``t_f``, ``t_b`` (input gradient),
    ``t_w`` (weight gradient; 0 keeps B whole) and free transfers.

    Returns ``makespan`` (units of the costs), ``bubble_fraction`` (idle share of rank-time),
    ``bubble_ratio`` (idle / busy), ``peak_inflight.max`` and ``peak_inflight.R`` per rank
    (activation sets held at once), ``closed_form_bubble_fraction`` where the chapters derive
    one (:func:`tpp.symbolic.pipeline.bubble_fraction`, schedules of
    :data:`CLOSED_FORM_SCHEDULES`, ``t_w = 0`` except zb-h1, else ``None``) and ``timeline``
    (rank, action, start, end) for the Gantt chart.
    """
    sched = tpp_pipeline.schedule(schedule, ranks, microbatches, virtual)
    res = tpp_pipeline.simulate(sched, t_f=t_f, t_b=t_b, t_w=t_w)
    peak = res.peak_inflight
    out: dict[str, Any] = {
        "makespan": float(res.makespan),
        "bubble_fraction": float(res.bubble_fraction),
        "bubble_ratio": float(res.bubble_ratio),
        "peak_inflight.max": max(peak),
    }
    out.update({f"peak_inflight.{r}": n for r, n in enumerate(peak)})
    out["closed_form_bubble_fraction"] = _closed_bubble(schedule, ranks, microbatches, virtual,
                                                        t_f, t_b, t_w)
    out["timeline"] = [[r, str(a), _kind(a), float(s), float(e)] for r, a, s, e in res.timeline]
    return out


def _kind(action: object) -> str:
    return getattr(action, "kind", "FB")


def _closed_bubble(name: str, P: int, M: int, v: int, t_f: int, t_b: int, t_w: int):
    if not _has_closed_form(name, P, M, v, t_w):
        return None
    expr = sym_pipeline.bubble_fraction(name)
    return float(sym_pipeline.evaluate(expr, P=P, M=M, v=v, t_F=t_f, t_B=t_b, t_W=t_w))


def _has_closed_form(name: str, P: int, M: int, v: int, t_w: int) -> bool:
    """Where the chapters' closed form holds: the five derived schedules, ``t_w = 0`` unless the
    schedule splits the backward (zb-h1, M >= P), interleaving with M a multiple of P."""
    key = name.lower()
    if key not in CLOSED_FORM_SCHEDULES:
        return False
    if key == "zb-h1":
        return M >= P
    if t_w != 0:
        return False
    return key != "interleaved" or M % P == 0


# ------------------------------------------------------------------------------------- memory
def memory(model: str = "llama2_70b", tp: int = 8, pp: int = 4, dp: int = 1, zero: int = 1,
           recompute: str = "selective", seq_len: int = 4096, microbatch_size: int = 1,
           microbatches: int = 8, gpu: str = "h100_sxm") -> dict[str, Any]:
    """Memory per GPU of a training layout, term by term on the heaviest pipeline rank:
    the memory :func:`tpp.planner.evaluate` finds for ``Layout(tp, pp, dp, zero=zero,
    recompute=recompute, microbatch_size=microbatch_size)`` with ``microbatches`` per step
    under 1F1B (global batch ``dp * microbatch_size * microbatches`` sequences of ``seq_len``
    tokens), computed without timing the step (:func:`tpp.planner.memory_table.evaluate_memory`).

    Returns ``memory.TERM`` (bytes: weights, gradients, optimizer states, activations of the
    microbatches in flight, logits, ZeRO-3's gathered layer), ``memory_bytes`` (their sum),
    ``capacity``, ``fits``, ``heaviest_rank`` and ``layers`` (layers on each pipeline rank).
    A layout the planner rejects raises ``ValueError`` with the planner's reasons.
    """
    m = models.model(model)
    lay = tpp_planner.Layout(tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute,
                             microbatch_size=microbatch_size)
    est = evaluate_memory(m, lay, gpu=gpu, seq_len=seq_len,
                          global_batch=dp * microbatch_size * microbatches)
    if est.memory_bytes is None:
        raise ValueError("; ".join(est.problems))
    out: dict[str, Any] = {f"memory.{k}": v for k, v in est.memory.items()}
    out.update(memory_bytes=est.memory_bytes, capacity=est.capacity,
               fits=est.memory_bytes <= est.capacity, heaviest_rank=est.heaviest_rank,
               layers=list(est.layers))
    return out


# ------------------------------------------------------------------------------------- layout
def layout(tp: int = 4, cp: int = 1, dp: int = 2, pp: int = 2,
           gpus_per_node: int = 8) -> dict[str, Any]:
    """The rank map of a TP x CP x DP x PP layout (:class:`tpp.planner.Layout`, Megatron's order,
    TP fastest) on nodes of ``gpus_per_node`` GPUs.

    Returns ``gpus``, ``nodes``, ``AXIS.nodes_spanned`` and ``AXIS.crosses_nodes`` for each axis
    (whether its groups need the network between nodes rather than NVLink inside one), and
    ``ranks``: the coordinates ``[tp, cp, dp, pp]`` of each global rank (its node is
    ``rank // gpus_per_node``).
    """
    lay = tpp_planner.Layout(tp=tp, cp=cp, dp=dp, pp=pp)
    out: dict[str, Any] = {"gpus": lay.gpus, "nodes": -(-lay.gpus // gpus_per_node)}
    for axis in tpp_planner.AXES:
        n = lay.nodes_spanned(axis, gpus_per_node)
        out[f"{axis}.nodes_spanned"] = n
        out[f"{axis}.crosses_nodes"] = n > 1
    out["ranks"] = [[lay.coords(r)[a] for a in tpp_planner.AXES] for r in range(lay.gpus)]
    return out


# ------------------------------------------------------------------------------- zero traffic
def zero_traffic(model: str = "llama2_7b", dp: int = 8, zero: int = 1, microbatches: int = 1,
                 link: str = "ib_ndr") -> dict[str, Any]:
    """Data parallelism with ZeRO stage ``zero`` over ``dp`` ranks for the whole ``model``
    (:mod:`tpp.costs.zero`, the ZeRO paper's accounting in bf16 with Adam's 12 bytes):

    ``model_state_bytes`` per rank (:func:`tpp.costs.zero.model_state_bytes`), ``bytes_sent``
    per rank per optimizer step with ``microbatches`` of gradient accumulation
    (:func:`tpp.costs.zero.dp_bytes_per_rank`: ring collectives, ZeRO-2 and 3 reduce every
    microbatch, ZeRO-3 gathers weights twice per microbatch), ``collectives`` per step, and
    ``comm_time``: those bytes over one ``link`` preset's bandwidth per direction (seconds, no
    latency, no overlap).
    """
    from tpp import hardware
    from tpp.costs import zero as czero

    n = models.model(model).params
    sent = czero.dp_bytes_per_rank(n, dp, zero, "bf16", microbatches)
    return {"model_state_bytes": czero.model_state_bytes(n, dp, zero), "bytes_sent": sent,
            "collectives": sum(czero.dp_collectives(zero, microbatches).values()),
            "comm_time": sent / hardware.link(link).bandwidth}


# --------------------------------------------------------------------------------- collective
def collective(op: str = "all_reduce", n: int = 8, payload_bytes: int = 2**24,
               link: str = "nvlink4") -> dict[str, Any]:
    """A ring collective under the alpha-beta model: :func:`tpp.collectives.alpha_beta_time`
    of ``op`` on ``n`` ranks for ``payload_bytes`` over the :mod:`tpp.hardware` link preset
    ``link`` (its bandwidth per direction and latency per step).

    Returns ``time`` (seconds), ``latency_time`` (``steps x alpha``), ``bandwidth_time``
    (``bus factor x V / beta``), ``latency_share`` and ``crossover_bytes``: the payload at which
    the two terms are equal (below it latency dominates). The page evaluates the chapter's SymPy
    expression :func:`tpp.symbolic.collectives.alpha_beta_time` printed by ``sympy.jscode``;
    this function uses the numeric library, so the test compares the two.
    """
    from tpp import collectives as coll
    from tpp import hardware

    ln = hardware.link(link)
    total = coll.alpha_beta_time(op, payload_bytes, n, ln.bandwidth, ln.latency)
    lat = coll.ring_steps(op, n) * ln.latency
    factor = float(coll.bus_factor(op, n))
    return {"time": total, "latency_time": lat,
            "bandwidth_time": factor * payload_bytes / ln.bandwidth,
            "latency_share": lat / total if total else 0.0,
            "crossover_bytes": lat * ln.bandwidth / factor if factor else None}


def collective_forms() -> dict[str, dict[str, str]]:
    """JavaScript (``sympy.jscode``) of chapter 01's alpha-beta time per op, its two terms and
    the crossover payload ``V*`` solving ``steps alpha = bytes_per_rank / beta``, in the
    variables ``N, V, alpha, beta`` (:mod:`tpp.symbolic.collectives`)."""
    from tpp.symbolic import collectives as sc

    out = {}
    for op in ("all_reduce", "reduce_scatter", "all_gather", "broadcast"):
        lat = sc.ring_steps(op) * sc.alpha
        bw = sc.bytes_per_rank(op) / sc.beta
        (cross,) = sympy.solve(sympy.Eq(lat, bw), sc.V)
        out[op] = {"time": sympy.jscode(sc.alpha_beta_time(op)),
                   "latency_time": sympy.jscode(lat), "bandwidth_time": sympy.jscode(bw),
                   "latency_share": sympy.jscode(sympy.simplify(lat / sc.alpha_beta_time(op))),
                   "crossover_bytes": sympy.jscode(cross)}
    return out
