"""Explorer-facing functions: what the site's in-page explorers and the lab's widgets compute.

Each function takes the explorer's inputs as keyword arguments and returns a flat ``dict`` of
numbers in the library's units (bytes, seconds, fractions; pipeline times in the units of the
costs), plus a few lists the page draws (a Gantt chart, a curve, a rank map). They are thin: the
arithmetic lives where it always lives —

* :func:`decode`: :func:`tpp.deployment.serving_layout` (itself :func:`tpp.serving.decode_step`
  per stage and :func:`tpp.deployment.decode_rounds` for the pipeline);
* :func:`pipeline`: :func:`tpp.pipeline.schedule` and :func:`tpp.pipeline.simulate`, and the
  closed form :func:`tpp.symbolic.pipeline.bubble_fraction` where the chapters derive one;
* :func:`memory`: the planner's :func:`tpp.planner.evaluate` (memory of the heaviest pipeline
  rank, term by term, with the library's layer placement :func:`tpp.planner.layers_per_chunk`);
* :func:`layout`: :class:`tpp.planner.Layout` (rank map, groups, nodes spanned);
* :func:`collective`: :func:`tpp.collectives.alpha_beta_time` (the page evaluates chapter 01's
  SymPy forms instead, :func:`collective_forms`, and the tests compare the two);
* :func:`zero_traffic`: :mod:`tpp.costs.zero` (model states and bytes sent per rank).

A bad combination raises the library's own ``ValueError``; the page shows its message.

The page has no Python: :data:`EXPLORERS` lists each explorer's inputs (the values a form offers)
and outputs (with their units), and :func:`table` evaluates the function on that grid at build
time, so the page looks its numbers up in JSON the library wrote (``_ext/tpp_explorers.py``
writes it). Closed forms go to the page as JavaScript printed by SymPy's code printer
(:func:`sympy.jscode`) from the chapters' own expressions (:func:`closed_forms`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from tpp import deployment, models
from tpp import pipeline as tpp_pipeline
from tpp import planner as tpp_planner
from tpp.symbolic import pipeline as sym_pipeline

__all__ = ["EXPLORERS", "Explorer", "decode", "pipeline", "memory", "layout", "table",
           "closed_forms", "lookup", "lab", "has_frontend", "collective",
           "collective_forms", "zero_traffic"]

CLOSED_FORM_SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved", "zb-h1")


# ------------------------------------------------------------------------------------- decode
def decode(model: str = "llama2_70b", tp: int = 8, pp: int = 1, interconnect: str = "nvlink4",
           gpu: str = "h100_sxm", batch: int = 16, context_len: int = 0) -> dict[str, Any]:
    """One decode step (one token for each of ``batch`` sequences) of ``model`` on ``tp`` x ``pp``
    GPUs: :func:`tpp.deployment.serving_layout` with one group of requests (``microbatches=1``),
    TP over ``interconnect``, the pipeline's hops over InfiniBand NDR (its default).

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
    for t in EXPLORERS["decode"].options["tp"]:
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
    :func:`tpp.planner.evaluate` of ``Layout(tp, pp, dp, zero=zero, recompute=recompute,
    microbatch_size=microbatch_size)`` with ``microbatches`` per step under 1F1B (global batch
    ``dp * microbatch_size * microbatches`` sequences of ``seq_len`` tokens).

    Returns ``memory.TERM`` (bytes: weights, gradients, optimizer states, activations of the
    microbatches in flight, logits, ZeRO-3's gathered layer), ``memory_bytes`` (their sum),
    ``capacity``, ``fits``, ``heaviest_rank`` and ``layers`` (layers on each pipeline rank).
    A layout the planner rejects raises ``ValueError`` with the planner's reasons.
    """
    m = models.model(model)
    lay = tpp_planner.Layout(tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute,
                             microbatch_size=microbatch_size)
    est = tpp_planner.evaluate(m, lay, gpu=gpu, seq_len=seq_len,
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


# ------------------------------------------------------------------------------- the contract
@dataclass(frozen=True)
class Explorer:
    """An in-page explorer: ``function`` over the grid ``options`` (parameter -> values offered),
    its ``outputs`` (name -> unit: bytes, seconds, fraction, bool, count, time, rank) and labels."""

    name: str
    function: Callable[..., dict]
    options: dict[str, tuple]
    defaults: dict[str, Any]
    outputs: dict[str, str]
    labels: dict[str, str]
    output_labels: dict[str, str]
    split: tuple[str, ...] = ()

    @property
    def qualname(self) -> str:
        return f"tpp.explorers.{self.function.__name__}"


_DECODE_MODELS = ("llama2_7b", "llama2_70b", "llama3_70b", "llama3_405b")
EXPLORERS: dict[str, Explorer] = {
    "decode": Explorer(
        "decode", decode,
        options=dict(model=_DECODE_MODELS, tp=(1, 2, 4, 8), pp=(1, 2, 4),
                     interconnect=("nvlink4", "pcie5_x16", "eth_200g"),
                     gpu=("h100_sxm", "h200_sxm"), batch=(1, 16, 64, 256),
                     context_len=(0, 2048, 8192)),
        defaults=dict(model="llama2_70b", tp=8, pp=1, interconnect="nvlink4", gpu="h100_sxm",
                      batch=16, context_len=0),
        outputs={"weight_bytes_per_gpu": "bytes", "memory_bytes_per_gpu": "bytes",
                 "fits": "bool", "step_time": "seconds", "tokens_per_second": "rate",
                 "scaling_efficiency": "fraction", "allreduce_bytes_per_gpu": "bytes",
                 "breakdown.weights": "seconds", "breakdown.allreduce": "seconds",
                 "breakdown.bubble": "seconds", "bubble_fraction": "fraction"},
        labels=dict(model="model", tp="TP degree", pp="PP degree", interconnect="TP interconnect",
                    gpu="GPU", batch="batch (sequences)", context_len="context (tokens)"),
        output_labels={"weight_bytes_per_gpu": "weights per GPU",
                       "memory_bytes_per_gpu": "weights + KV cache per GPU",
                       "fits": "fits in GPU memory", "step_time": "step time (per token)",
                       "tokens_per_second": "throughput",
                       "scaling_efficiency": "scaling efficiency vs TP1",
                       "allreduce_bytes_per_gpu": "all-reduce bytes sent per GPU per step",
                       "breakdown.weights": "reading weights + KV",
                       "breakdown.allreduce": "all-reduce", "breakdown.bubble": "pipeline bubble",
                       "bubble_fraction": "bubble fraction"},
        split=("model",)),
    "pipeline": Explorer(
        "pipeline", pipeline,
        options=dict(schedule=tuple(tpp_pipeline.SCHEDULES), ranks=(2, 4, 8),
                     microbatches=(2, 4, 8, 16), virtual=(1, 2), t_f=(1, 2), t_b=(1, 2, 3),
                     t_w=(0, 1)),
        defaults=dict(schedule="1f1b", ranks=4, microbatches=8, virtual=1, t_f=1, t_b=2, t_w=0),
        outputs={"makespan": "time", "bubble_fraction": "fraction", "bubble_ratio": "fraction",
                 "peak_inflight.max": "count", "closed_form_bubble_fraction": "fraction"},
        labels=dict(schedule="schedule", ranks="P (pipeline ranks)",
                    microbatches="M (microbatches)", virtual="v (chunks per rank)",
                    t_f="t_F (forward)", t_b="t_B (input gradient)", t_w="t_W (weight gradient)"),
        output_labels={"makespan": "makespan", "bubble_fraction": "bubble (share of rank-time)",
                       "bubble_ratio": "bubble / busy", "peak_inflight.max":
                       "peak in-flight activation sets (max over ranks)",
                       "closed_form_bubble_fraction": "closed form (SymPy), in the page"},
        split=("schedule", "ranks", "microbatches", "virtual")),
    "memory": Explorer(
        "memory", memory,
        options=dict(model=("llama2_7b", "llama2_70b", "llama3_405b"), tp=(1, 2, 4, 8),
                     pp=(1, 2, 4, 8), dp=(1, 8), zero=(0, 1, 2, 3),
                     recompute=tuple(tpp_planner.RECOMPUTE), seq_len=(2048, 8192),
                     microbatch_size=(1, 2)),
        defaults=dict(model="llama2_70b", tp=8, pp=4, dp=8, zero=1, recompute="selective",
                      seq_len=2048, microbatch_size=1),
        outputs={"memory.weights": "bytes", "memory.gradients": "bytes",
                 "memory.optimizer_states": "bytes", "memory.activations": "bytes",
                 "memory.recompute_buffer": "bytes", "memory.logits": "bytes",
                 "memory.zero3_gathered": "bytes", "memory.runtime_reserve": "bytes",
                 "memory_bytes": "bytes", "capacity": "bytes", "fits": "bool",
                 "heaviest_rank": "rank"},
        labels=dict(model="model", tp="TP degree", pp="PP degree", dp="DP degree",
                    zero="ZeRO stage", recompute="recompute", seq_len="sequence length (tokens)",
                    microbatch_size="microbatch size (sequences)"),
        output_labels={"memory.weights": "weights", "memory.gradients": "gradients",
                       "memory.optimizer_states": "optimizer states",
                       "memory.activations": "activations (microbatches in flight)",
                       "memory.recompute_buffer": "recompute buffer",
                       "memory.logits": "logits", "memory.zero3_gathered": "ZeRO-3 gathered layer",
                       "memory.runtime_reserve": "runtime reserve",
                       "memory_bytes": "total per GPU", "capacity": "GPU memory",
                       "fits": "fits in GPU memory",
                       "heaviest_rank": "heaviest pipeline rank"},
        split=("model",)),
    "collective": Explorer(
        "collective", collective,
        options=dict(op=("all_reduce", "reduce_scatter", "all_gather", "broadcast"),
                     n=(2, 4, 8, 16, 64, 256),
                     payload_bytes=tuple(2**k for k in range(10, 33, 2)),
                     link=("nvlink4", "nvlink5", "pcie5_x16", "ib_ndr", "eth_100g")),
        defaults=dict(op="all_reduce", n=8, payload_bytes=2**24, link="nvlink4"),
        outputs={"time": "seconds", "latency_time": "seconds", "bandwidth_time": "seconds",
                 "latency_share": "fraction", "crossover_bytes": "bytes"},
        labels=dict(op="collective", n="N (ranks)", payload_bytes="payload V (bytes)",
                    link="link preset"),
        output_labels={"time": "time (alpha-beta, ring)", "latency_time": "latency term",
                       "bandwidth_time": "bandwidth term", "latency_share": "latency share",
                       "crossover_bytes": "payload where the terms are equal"}),
    "zero_traffic": Explorer(
        "zero_traffic", zero_traffic,
        options=dict(model=("llama2_7b", "llama2_70b", "llama3_405b"),
                     dp=(2, 4, 8, 16, 64, 256), zero=(0, 1, 2, 3), microbatches=(1, 4, 16),
                     link=("nvlink4", "ib_ndr", "eth_100g")),
        defaults=dict(model="llama2_7b", dp=8, zero=1, microbatches=1, link="ib_ndr"),
        outputs={"model_state_bytes": "bytes", "bytes_sent": "bytes", "collectives": "count",
                 "comm_time": "seconds"},
        labels=dict(model="model", dp="DP degree", zero="ZeRO stage",
                    microbatches="microbatches per step", link="link preset"),
        output_labels={"model_state_bytes": "model states per rank",
                       "bytes_sent": "bytes sent per rank per step",
                       "collectives": "collectives per step",
                       "comm_time": "time on the link (bytes / bandwidth)"}),
    "layout": Explorer(
        "layout", layout,
        options=dict(tp=(1, 2, 4, 8), cp=(1, 2), dp=(1, 2, 4), pp=(1, 2, 4)),
        defaults=dict(tp=4, cp=1, dp=2, pp=2),
        outputs={"gpus": "count", "nodes": "count", "tp.nodes_spanned": "count",
                 "cp.nodes_spanned": "count", "dp.nodes_spanned": "count",
                 "pp.nodes_spanned": "count"},
        labels=dict(tp="TP degree", cp="CP degree", dp="DP degree", pp="PP degree"),
        output_labels={"gpus": "GPUs", "nodes": "nodes of 8",
                       "tp.nodes_spanned": "nodes one TP group spans",
                       "cp.nodes_spanned": "nodes one CP group spans",
                       "dp.nodes_spanned": "nodes one DP group spans",
                       "pp.nodes_spanned": "nodes one PP group spans"}),
}

def _json_number(x: Any) -> Any:
    """A value as the page stores it: bools as 0/1, floats to 12 significant digits."""
    if x is None:
        return None
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, Fraction):
        x = float(x)
    if isinstance(x, float):
        return float(f"{x:.12g}") if math.isfinite(x) else None
    return x


EXTRAS = {"decode": ("stage_time", "p2p_time"), "pipeline": ("peak_inflight", "timeline"),
          "memory": ("layers",), "layout": ("ranks",), "collective": (),
          "zero_traffic": ()}
"""What the page draws besides the outputs (the decode curve reads the other TP rows)."""


def _evaluate(ex: Explorer, values: dict[str, Any]) -> Any:
    try:
        res = ex.function(**values)
    except ValueError as err:
        return str(err)
    row = [_json_number(res.get(k)) for k in ex.outputs]
    for k in EXTRAS[ex.name]:
        if k == "peak_inflight":
            row.append([res[f"peak_inflight.{r}"] for r in range(values["ranks"])])
        elif k == "timeline":
            labels: dict[str, int] = {}
            flat = []
            for r, a, _kind, st, en in res["timeline"]:
                flat += [r, labels.setdefault(a, len(labels)), _json_number(st),
                         _json_number(en)]
            row.append({"labels": list(labels), "events": flat})
        else:
            row.append(_json_number(res[k]) if not isinstance(res[k], list) else res[k])
    return row


def table(name: str, **fixed: Any) -> dict[str, Any]:
    """Evaluate explorer ``name`` on its whole grid of options (or on the sub-grid with the
    parameters in ``fixed`` held): ``{"axes": [[param, values], ...], "outputs": [...],
    "extras": [...], "rows": [...]}``, rows in row-major order of the axes, each either the
    list of output values then extras or the ``ValueError`` message (a string)."""
    ex = EXPLORERS[name]
    axes = [[k, list(v)] for k, v in ex.options.items() if k not in fixed]
    rows = []
    for combo in itertools.product(*(v for _, v in axes)):
        values = {**fixed, **dict(zip((k for k, _ in axes), combo, strict=True))}
        rows.append(_evaluate(ex, values))
    return {"axes": axes, "fixed": fixed, "outputs": list(ex.outputs),
            "extras": list(EXTRAS[name]), "rows": rows}


def tables(name: str) -> dict[str, dict[str, Any]]:
    """The data files of explorer ``name``: one :func:`table` per combination of its ``split``
    parameters (the page loads only the file of the current selection), keyed by their values
    joined with ``-`` (``"1f1b-4-8-1"``; ``""`` when the explorer is not split)."""
    ex = EXPLORERS[name]
    if name == "collective":  # closed forms only: the page needs the link presets' numbers
        from tpp import hardware

        links = {k: [hardware.link(k).bandwidth, hardware.link(k).latency]
                 for k in ex.options["link"]}
        return {"": {"formula": True, "axes": [[k, list(v)] for k, v in ex.options.items()],
                     "outputs": list(ex.outputs), "extras": [], "rows": [], "links": links}}
    out = {}
    for combo in itertools.product(*(ex.options[k] for k in ex.split)):
        key = "-".join(map(str, combo))
        out[key] = table(name, **dict(zip(ex.split, combo, strict=True)))
    return out


def lookup(tbl: dict[str, Any], **values: Any) -> Any:
    """The row of ``tbl`` (from :func:`table`) for ``values``, as the page finds it."""
    idx = 0
    for k, vals in tbl["axes"]:
        idx = idx * len(vals) + vals.index(values[k])
    return tbl["rows"][idx]


def closed_forms() -> dict[str, str]:
    """JavaScript bodies of the chapters' closed bubble fractions
    (:func:`tpp.symbolic.pipeline.bubble_fraction`), printed by :func:`sympy.jscode`, in the
    variables ``P, M, v, t_F, t_B, t_W``."""
    return {name: sympy.jscode(sym_pipeline.bubble_fraction(name))
            for name in CLOSED_FORM_SCHEDULES}


def closed_form_applies(schedule: str, ranks: int, microbatches: int, virtual: int,
                        t_w: int) -> bool:
    """Whether the page evaluates the closed form for these inputs (see :func:`pipeline`)."""
    return _has_closed_form(schedule, ranks, microbatches, virtual, t_w)


def lab(name: str):
    """The JupyterLab explorer: ipywidgets controls over the same options calling the same
    function as the page, showing its outputs. Headless (no front end, e.g. ``jupyter nbconvert
    --execute`` or the book build) it shows the defaults' outputs once and builds no widgets."""
    import os

    ex = EXPLORERS[name]

    def show(**values):
        try:
            res = ex.function(**values)
        except ValueError as err:
            print("ValueError:", err)
            return
        for k, unit in ex.outputs.items():
            if res.get(k) is not None:
                print(f"{ex.output_labels[k]}: {format_value(res[k], unit)}")

    if os.environ.get("TPP_STATIC") or not has_frontend():
        show(**ex.defaults)
        return None
    import ipywidgets as widgets

    controls = {k: widgets.Dropdown(options=list(v), value=ex.defaults[k],
                                    description=ex.labels[k])
                for k, v in ex.options.items()}
    return widgets.interact(show, **controls)


def has_frontend() -> bool:
    """Whether this kernel was started by a Jupyter front end that renders widgets.

    jupyter_server (JupyterLab, Notebook 7) starts every kernel of a session with
    ``JPY_SESSION_NAME`` in its environment (``jupyter_server/services/sessions/
    sessionmanager.py``, ``get_kernel_env``); VS Code's kernels carry ``VSCODE_PID``. A kernel
    of ``jupyter nbconvert --execute``, nbclient or nbmake has neither, and there live widgets
    can deadlock the run (jupyter/nbclient#312), so explorers run once at their defaults."""
    import os

    return bool(os.environ.get("JPY_SESSION_NAME") or os.environ.get("VSCODE_PID"))


def format_value(x: Any, unit: str) -> str:
    """Human text for a value in the library's units (the page's JS formats the same way)."""
    if x is None:
        return "n/a"
    if unit == "bool":
        return "yes" if x else "no"
    if unit == "bytes":
        return f"{x / 1e9:.2f} GB"
    if unit == "seconds":
        return f"{x * 1e3:.3f} ms"
    if unit == "fraction":
        return f"{100 * x:.1f} %"
    if unit == "rate":
        return f"{x:,.0f} tokens/s"
    return f"{x:g}"
