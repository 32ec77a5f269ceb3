"""Search every layout of a model on ``gpus`` GPUs: :func:`plan`.

Enumerates TP (dividing the GPU count, at most a node), CP, PP, DP = the rest, virtual stages,
microbatch sizes, ZeRO stages and recomputation; a layout is dropped as soon as a rule fails or
its model states alone exceed the GPU's memory (before the pipeline is simulated). Survivors are
evaluated with :func:`tpp.planner.evaluate` and returned fastest first.
"""

from __future__ import annotations

from tpp import hardware
from tpp.costs import zero as czero
from tpp.models import ModelConfig
from tpp.planner.estimate import Estimate, _hsdp_shard, _structure_problems, evaluate
from tpp.planner.layout import RECOMPUTE, Layout, max_chunks

__all__ = ["plan", "candidate_layouts"]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidate_layouts(model: ModelConfig, gpus: int, *, gpus_per_node: int = 8, seq_len: int,
                      global_batch: int, cps: tuple[int, ...] = (1,),
                      virtuals: tuple[int, ...] = (1, 2, 4, 8),
                      microbatch_sizes: tuple[int, ...] = (1, 2, 4),
                      zeros: tuple[int, ...] = (0, 1, 2, 3),
                      recomputes: tuple[str, ...] = RECOMPUTE,
                      hsdps: tuple[bool, ...] = (False, True),
                      sps: tuple[bool, ...] = (True,)) -> list[Layout]:
    """Every layout on exactly ``gpus`` GPUs that breaks none of the structural rules."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus={gpus!r} must be an int >= 1")
    out = []
    divs = _divisors(gpus)
    for tp in (d for d in divs if d <= gpus_per_node):
        for cp in (c for c in cps if (gpus // tp) % c == 0):
            rest = gpus // (tp * cp)
            top = max_chunks(model.n_layers)
            for pp in (d for d in _divisors(rest) if d <= top):
                dp = rest // pp
                for v in (x for x in virtuals if x == 1 or (pp > 1 and pp * x <= top)):
                    for b in microbatch_sizes:
                        base = Layout(tp, pp, dp, cp, v, b)
                        if _structure_problems(model, base, gpus_per_node, seq_len,
                                               global_batch):
                            continue
                        out += [Layout(tp, pp, dp, cp, v, b, z, rc, sp=q, hsdp=hs)
                                for z in zeros for rc in recomputes for hs in hsdps
                                for q in (sps if tp > 1 else (True,))
                                if not hs or (z == 3 and dp * cp > 1)]
    return out


def plan(model: ModelConfig, gpus: int, *, gpu: str = "h100_sxm", gpus_per_node: int = 8,
         seq_len: int, global_batch: int, top: int = 10, mfu: float | None = None,
         inter_link: str | None = None, evaluate_kw: dict | None = None,
         **space) -> list[Estimate]:
    """The ``top`` fitting layouts of ``model`` on ``gpus`` GPUs, fastest step first.

    ``evaluate_kw``: further options of :func:`evaluate` (memory recipe, attention kernel...).
    ``space`` narrows or widens the search (``cps``, ``virtuals``, ``microbatch_sizes``,
    ``zeros``, ``recomputes``, ``hsdps``, ``sps``; see :func:`candidate_layouts`). Raises
    ``ValueError`` when no layout fits, saying the smallest memory any layout needs.
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top={top!r} must be an int >= 1")
    cap = hardware.gpu(gpu).capacity
    cands = candidate_layouts(model, gpus, gpus_per_node=gpus_per_node, seq_len=seq_len,
                              global_batch=global_batch, **space)
    if not cands:
        raise ValueError(f"no layout of {model.name} on {gpus} GPUs satisfies the divisibility "
                         f"rules (heads {model.n_heads}, KV heads {model.n_kv_heads}, "
                         f"{model.n_layers} layers, batch {global_batch}): change the GPU "
                         "count or the global batch")
    fitting: list[Estimate] = []
    least = None
    kw = dict(gpu=gpu, gpus_per_node=gpus_per_node, seq_len=seq_len, global_batch=global_batch,
              mfu=mfu, inter_link=inter_link, **(evaluate_kw or {}))
    ekw = evaluate_kw or {}
    opt_bytes = czero.adam_state_bytes(ekw.get("moment_dtype", "fp32"),
                                       ekw.get("master_weights", True))
    ranked = []
    for lay in cands:
        # model states alone are a lower bound on memory: skip hopeless layouts early
        shard = _hsdp_shard(lay, gpus_per_node) if lay.hsdp else lay.dp * lay.cp
        states = czero.model_state_bytes(model.params // (lay.tp * lay.pp), shard, lay.zero,
                                         grad_bytes=ekw.get("grad_bytes", 2),
                                         optimizer_bytes=opt_bytes)
        if states > cap:
            least = min(least or states, states)
            continue
        bound = evaluate(model, lay, time_bound=0.0, **kw).time["compute_lower_bound"]
        ranked.append((bound, str(lay), lay))
    ranked.sort(key=lambda x: (x[0], x[1]))
    for bound, _, lay in ranked:  # branch and bound: compute time is a lower bound
        if len(fitting) >= top and bound > fitting[top - 1].step_time:
            break
        est = evaluate(model, lay, memory_first=True, **kw)
        if est.fits:
            fitting.append(est)
            fitting.sort(key=lambda e: (e.step_time, e.memory_bytes))
        elif est.memory_bytes is not None:
            least = min(least or est.memory_bytes, est.memory_bytes)
    if not fitting:
        need = f"; the least any layout needs is {least / 1e9:.0f} GB" if least else ""
        raise ValueError(f"{model.name} fits no layout on {gpus} x {gpu} "
                         f"({cap / 1e9:.0f} GB each){need}: add GPUs, use a bigger GPU or a "
                         "smaller batch")
    fitting.sort(key=lambda e: (e.step_time, e.memory_bytes))
    return fitting[:top]
