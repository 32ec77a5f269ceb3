"""The site's in-page explorers: the contract between the library and the page.

An explorer is a function of :mod:`tpp.site.explorer_functions` over a grid of inputs. The page
has no Python: :data:`EXPLORERS` lists each explorer's inputs (the values a form offers) and
outputs (with their units), and :func:`table` evaluates the function on that grid at build
time, so the page looks its numbers up in JSON the library wrote (``_ext/tpp_explorers.py``
writes it). Closed forms go to the page as JavaScript printed by SymPy's code printer
(:func:`sympy.jscode`) from the chapters' own expressions (:func:`closed_forms`). In JupyterLab
the same explorer is a widget over the same function (:func:`lab`).

A form names its function by :attr:`Explorer.qualname`, ``tpp.site.explorers.<function>``: the
functions are re-exported here so that the name resolves.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import sympy

from tpp import pipeline as tpp_pipeline
from tpp import planner as tpp_planner
from tpp.site.explorer_functions import (
    CLOSED_FORM_SCHEDULES,
    DECODE_TP,
    _has_closed_form,
    collective,
    collective_forms,
    decode,
    layout,
    memory,
    pipeline,
    zero_traffic,
)
from tpp.symbolic import pipeline as sym_pipeline

__all__ = ["EXPLORERS", "Explorer", "decode", "pipeline", "memory", "layout", "table",
           "closed_forms", "lookup", "lab", "has_frontend", "collective",
           "collective_forms", "zero_traffic"]

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
        return f"tpp.site.explorers.{self.function.__name__}"


_DECODE_MODELS = ("llama2_7b", "llama2_70b", "llama3_70b", "llama3_405b")
EXPLORERS: dict[str, Explorer] = {
    "decode": Explorer(
        "decode", decode,
        options=dict(model=_DECODE_MODELS, tp=DECODE_TP, pp=(1, 2, 4),
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
