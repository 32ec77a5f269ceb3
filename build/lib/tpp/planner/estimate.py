"""Memory per GPU and time per step of one layout: :func:`evaluate`.

Every term comes from a module that owns it:

* weights, gradients, optimizer states: :func:`tpp.costs.zero.model_state_terms` on the
  parameters one rank holds (:func:`tpp.costs.memory.layer_params_per_rank` per layer; the
  vocabulary-parallel embedding and LM head split ``TP`` ways), ZeRO sharding over DP x CP;
* activations: :func:`tpp.costs.memory.activation_bytes_per_layer` (Korthikanti et al. 2022, with
  sequence parallelism when TP > 1, the sequence split ``CP`` ways), times the activation sets a
  rank holds at its peak, read from the simulated schedule (:mod:`tpp.pipeline`);
* compute: :func:`tpp.costs.flops.training_flops_per_layer` at a stated MFU;
* TP collectives (:func:`tpp.costs.tp.tp_comm_time`) and CP all-gathers
  (:func:`tpp.collectives.alpha_beta_time`) are added to each stage's forward/backward time;
* the pipeline's makespan, bubble included, is the event simulation of the schedule
  (:func:`tpp.pipeline.simulate`) with those per-stage times and the boundary transfers;
* DP/ZeRO bytes: :func:`tpp.costs.zero.dp_bytes_per_rank`, one ring collective per layer (an
  FSDP unit or DDP bucket), each paying ``ring_steps x alpha`` (a ring at thousands of ranks is
  latency-bound: NCCL switches to trees there, so this is pessimistic); gradient reductions
  overlap with the backward (the last microbatch's, or every microbatch's for stages 2-3),
  ZeRO-3's all-gathers with compute; the weight all-gather after the update (stages 1-2) is exposed.

Not modelled: the optimizer step's own time, kernel launch gaps, link contention between axes,
the memory allocator's fragmentation. Memory is compared with the full capacity of the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from tpp import hardware
from tpp.collectives import alpha_beta_time, ring_steps
from tpp.costs import flops as cflops
from tpp.costs import memory as cmem
from tpp.costs import tp as ctp
from tpp.costs import zero as czero
from tpp.models import ModelConfig
from tpp.pipeline import schedule as build_schedule
from tpp.pipeline import simulate
from tpp.planner.layout import Layout, chunk_rank, layers_per_chunk

__all__ = ["Estimate", "evaluate", "default_inter_link"]


@dataclass
class Estimate:
    """What :func:`evaluate` says about one layout. Bytes are ints, times seconds."""

    layout: Layout
    fits: bool
    problems: list[str]
    memory_bytes: int | None = None
    memory: dict[str, int] = field(default_factory=dict)
    heaviest_rank: int | None = None
    step_time: float | None = None
    time: dict[str, float] = field(default_factory=dict)
    microbatches: int | None = None
    layers: list[int] = field(default_factory=list)
    capacity: int = 0
    model_flops_per_step: float = 0.0
    peak_flops: float = 0.0

    @property
    def mfu(self) -> float | None:
        """Model FLOPs per step / (step time x GPUs x peak), as papers report it."""
        if not self.step_time:
            return None
        return self.model_flops_per_step / (self.step_time * self.layout.gpus * self.peak_flops)

    def explain(self) -> str:
        """One paragraph: the layout, its memory and its time, or what is wrong."""
        head = str(self.layout)
        if self.memory_bytes is None:
            return f"{head}: " + "; ".join(self.problems)
        mem = ", ".join(f"{k} {v / 1e9:.1f}" for k, v in self.memory.items() if v)
        t = ", ".join(f"{k} {v:.3f}" for k, v in self.time.items())
        verdict = "fits" if self.fits else "does not fit: " + "; ".join(self.problems)
        return (f"{head}: {self.memory_bytes / 1e9:.1f} GB per GPU ({mem}) of "
                f"{self.capacity / 1e9:.0f} GB, {verdict}; step {self.step_time:.2f} s ({t}), "
                f"MFU {self.mfu:.0%}")


def default_inter_link(gpu: str) -> str:
    """The scale-out link paired with a GPU preset: IB HDR for A100, NDR for H100/H200."""
    return "ib_hdr" if hardware.gpu(gpu).link == "nvlink3" else "ib_ndr"


def _structure_problems(model: ModelConfig, lay: Layout, gpus_per_node: int, seq_len: int,
                        global_batch: int) -> list[str]:
    p = []
    if model.n_heads % lay.tp:
        p.append(f"TP={lay.tp} does not divide the {model.n_heads} attention heads: use a TP "
                 f"that divides {model.n_heads}")
    elif lay.tp > model.n_kv_heads and lay.tp % model.n_kv_heads:
        p.append(f"TP={lay.tp} > {model.n_kv_heads} KV heads is not a multiple of them, so KV "
                 "heads cannot be replicated evenly")
    elif lay.tp <= model.n_kv_heads and model.n_kv_heads % lay.tp:
        p.append(f"TP={lay.tp} does not divide the {model.n_kv_heads} KV heads")
    if model.d_ff % lay.tp:
        p.append(f"TP={lay.tp} does not divide d_ff={model.d_ff}")
    if lay.tp > gpus_per_node:
        p.append(f"TP={lay.tp} is larger than a node ({gpus_per_node} GPUs): its all-reduces "
                 "would cross the inter-node network; keep TP <= GPUs per node")
    if lay.pp * lay.virtual > model.n_layers:
        p.append(f"{lay.pp * lay.virtual} pipeline chunks (PP x v) for {model.n_layers} "
                 "layers: more stages than layers; lower PP or v")
    if seq_len % lay.cp or (lay.cp > 1 and seq_len % (2 * lay.cp)):
        p.append(f"CP={lay.cp} must split seq_len={seq_len} into 2 x CP equal chunks "
                 "(zig-zag balance)")
    elif lay.tp > 1 and (seq_len // lay.cp) % lay.tp:
        p.append(f"sequence parallelism needs TP={lay.tp} to divide the {seq_len // lay.cp} "
                 "tokens per CP rank")
    per_replica, rem = divmod(global_batch, lay.dp * lay.microbatch_size)
    if rem or per_replica == 0:
        p.append(f"global batch {global_batch} sequences does not split into DP={lay.dp} x "
                 f"microbatches of {lay.microbatch_size}: make it a multiple of "
                 f"{lay.dp * lay.microbatch_size}")
    elif lay.virtual > 1 and per_replica % lay.pp:
        p.append(f"interleaving needs the {per_replica} microbatches to be a multiple of "
                 f"PP={lay.pp}")
    return p


def _simulate(pp: int, m: int, v: int, t_f: tuple, t_b: tuple, transfer: float):
    sched = build_schedule("1f1b" if v == 1 else "interleaved", pp, m, v)
    res = simulate(sched, t_f=list(t_f), t_b=list(t_b), p2p_latency=transfer)
    return res.makespan, res.busy, res.peak_inflight


@lru_cache(maxsize=4096)
def _pipeline(pp: int, m: int, v: int, t_f: tuple, t_b: tuple, transfer: float):
    """Makespan, busy time per rank and peak in-flight activation sets per rank (cached).

    Past ``M = 6 P`` both schedules are in their steady state (with uneven stages the
    interleaved one needs about four groups of ``P`` to settle): one more group of ``P``
    microbatches adds the same time, so the makespan is extrapolated linearly from simulations
    at ``5P`` and ``6P`` (tests compare it with full simulations); busy time is exactly linear
    in ``M`` and the peak in-flight count no longer changes.
    """
    if pp == 1:
        busy = m * (t_f[0] + t_b[0])
        return busy, [busy], [1]
    if m <= 6 * pp:
        return _simulate(pp, m, v, t_f, t_b, transfer)
    t5, _, _ = _simulate(pp, 5 * pp, v, t_f, t_b, transfer)
    t6, busy6, peak6 = _simulate(pp, 6 * pp, v, t_f, t_b, transfer)
    makespan = t6 + (t6 - t5) * (m - 6 * pp) / pp
    return makespan, [b * m / (6 * pp) for b in busy6], peak6


def evaluate(model: ModelConfig, layout: Layout, *, gpu: str = "h100_sxm",
             gpus_per_node: int = 8, seq_len: int, global_batch: int, mfu: float = 0.4,
             inter_link: str | None = None, gpus: int | None = None,
             time_bound: float | None = None) -> Estimate:
    """Memory per GPU (heaviest pipeline rank), step time and every violated rule of ``layout``.

    ``seq_len`` tokens per sequence; ``global_batch`` and ``layout.microbatch_size`` count
    sequences; ``mfu`` is the share of peak bf16 FLOP/s the matmuls reach; ``gpu`` a
    :mod:`tpp.hardware` preset (its NVLink carries TP and CP inside a node), ``inter_link`` the
    network between nodes (default :func:`default_inter_link`). ``gpus``, when given, must equal
    ``layout.gpus``. ``time_bound`` (seconds): when the busiest rank's compute alone, a lower
    bound of the step time, exceeds it, stop before simulating the pipeline and return an
    estimate with ``step_time=None``, that bound in ``time["compute_lower_bound"]`` and the
    reason in ``problems`` (the search uses it to skip layouts that cannot win).
    """
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a tpp.models.ModelConfig, got {type(model).__name__}: "
                         "use tpp.models.model('llama3_405b')")
    if not isinstance(layout, Layout):
        raise ValueError("layout must be a tpp.planner.Layout")
    for name, v in (("seq_len", seq_len), ("global_batch", global_batch),
                    ("gpus_per_node", gpus_per_node)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be an int >= 1")
    if gpus is not None and gpus != layout.gpus:
        raise ValueError(f"layout {layout} uses TP x CP x PP x DP = {layout.gpus} GPUs, not "
                         f"{gpus}: change a degree so the product is {gpus}")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    dev = hardware.gpu(gpu)
    intra = hardware.link(dev.link)
    inter = hardware.link(inter_link or default_inter_link(gpu))
    lay = layout
    est = Estimate(lay, False, _structure_problems(model, lay, gpus_per_node, seq_len,
                                                   global_batch), capacity=dev.memory,
                   peak_flops=dev.peak_flops_bf16)
    if est.problems:
        return est
    t, P, v, b = lay.tp, lay.pp, lay.virtual, lay.microbatch_size
    s = seq_len // lay.cp
    M = global_batch // (lay.dp * b)
    est.microbatches = M
    chunks = layers_per_chunk(model.n_layers, P * v)
    est.layers = [sum(chunks[c] for c in range(len(chunks)) if chunk_rank(c, P) == r)
                  for r in range(P)]
    h, V = model.d_model, model.vocab_size
    # -- parameters of each pipeline rank ------------------------------------------------------
    layer_p = cmem.layer_params_per_rank(model, t, replicate_kv=t > model.n_kv_heads)
    emb = -(-V // t) * h
    first = emb + model.learned_positions * h
    last = model.norm_params + emb  # LM head (a copy of the tied embedding when tied)
    params = [est.layers[r] * layer_p for r in range(P)]
    params[0] += first
    params[P - 1] += last if P > 1 else (0 if model.tied_embeddings else emb) + model.norm_params
    # -- time of one microbatch per chunk --------------------------------------------------------
    peak = dev.peak_flops_bf16 * mfu
    f_layer = cflops.forward_flops_per_layer(model, b, seq_len) / (t * lay.cp)
    tr_layer = cflops.training_flops_per_layer(model, b, seq_len, lay.recompute) / (t * lay.cp)
    f_head = 2 * b * seq_len * h * V / (t * lay.cp)
    sp = t > 1
    tp_f = ctp.tp_comm_time(b, s, h, t, intra.bandwidth, intra.latency, 1, "forward", sp) \
        if t > 1 else 0.0
    tp_b = ctp.tp_comm_time(b, s, h, t, intra.bandwidth, intra.latency, 1, "step", sp,
                            recompute=lay.recompute) - tp_f if t > 1 else 0.0
    cp_link = intra if lay.nodes_spanned("cp", gpus_per_node) == 1 else inter
    kv = 2 * b * seq_len * cmem.kv_heads_per_rank(model.n_kv_heads, t) * model.d_head * 2
    cp_f = alpha_beta_time("all_gather", kv, lay.cp, cp_link.bandwidth, cp_link.latency)
    t_f, t_b = [], []
    for c, n in enumerate(chunks):
        head = f_head if c == len(chunks) - 1 else 0.0
        t_f.append(n * (f_layer / peak + tp_f + cp_f) + head / peak)
        t_b.append(n * ((tr_layer - f_layer) / peak + tp_b + 2 * cp_f) + 2 * head / peak)
    lower = M * max(sum(t_f[c] + t_b[c] for c in range(len(chunks)) if chunk_rank(c, P) == q)
                    for q in range(P))
    if time_bound is not None and lower > time_bound:
        est.time = {"compute_lower_bound": lower}
        est.problems.append(f"compute alone takes {lower:.3f} s > time_bound={time_bound} s")
        return est
    pp_link = inter if lay.nodes_spanned("pp", gpus_per_node) > 1 else intra
    boundary = b * s * h * 2 // t  # scatter-gather: each TP rank sends 1/t (Narayanan 2021)
    transfer = alpha_beta_time("send", boundary, 2, pp_link.bandwidth, pp_link.latency) \
        if P > 1 else 0.0
    makespan, busy, inflight = _pipeline(P, M, v, tuple(t_f), tuple(t_b), transfer)
    # -- memory of each pipeline rank ----------------------------------------------------------
    act_layer = cmem.activation_bytes_per_layer(
        s, b, h, model.n_heads, t, sp, lay.recompute, model.d_ff, model.n_kv_heads)
    best = None
    for r in range(P):
        terms = czero.model_state_terms(params[r], lay.dp * lay.cp, lay.zero)
        per_chunk = max(chunks[c] for c in range(len(chunks)) if chunk_rank(c, P) == r)
        terms["activations"] = inflight[r] * per_chunk * act_layer
        terms["logits"] = 4 * b * s * -(-V // t) if r == P - 1 else 0
        terms["zero3_gathered"] = 2 * 2 * layer_p if lay.zero == 3 else 0
        total = sum(terms.values())
        if best is None or total > best[0]:
            best = (total, r, terms)
    est.memory_bytes, est.heaviest_rank, est.memory = best
    # -- data parallelism ----------------------------------------------------------------------
    dp_n = lay.dp * lay.cp
    r = est.heaviest_rank
    dp_link = inter if lay.nodes_spanned("dp", gpus_per_node) > 1 else intra
    dp_bytes = czero.dp_bytes_per_rank(params[r], dp_n, lay.zero, "bf16", M) if dp_n > 1 else 0
    # one collective per layer (FSDP unit / DDP bucket), each paying ring_steps x alpha
    units = est.layers[r] + (r == 0) + (r == P - 1)
    alpha = dp_link.latency
    ops = czero.dp_collectives(lay.zero, M)
    dp_time = dp_bytes / dp_link.bandwidth + units * alpha * sum(
        c * ring_steps(op, dp_n) for op, c in ops.items())
    after = 0.0  # the weight all-gather after the update cannot hide (stages 1, 2)
    if lay.zero in (1, 2) and dp_n > 1:
        after = (czero.dp_bytes_per_rank(params[r], dp_n, 1, "bf16") / 2 / dp_link.bandwidth
                 + units * alpha * ring_steps("all_gather", dp_n))
    per_mb_b = sum(t_b[c] for c in range(len(chunks)) if chunk_rank(c, P) == r)
    per_mb_f = sum(t_f[c] for c in range(len(chunks)) if chunk_rank(c, P) == r)
    window = {0: per_mb_b, 1: per_mb_b, 2: M * per_mb_b, 3: M * (per_mb_f + per_mb_b)}[lay.zero]
    dp_exposed = after + max(0.0, dp_time - after - window)
    compute = max(busy)
    est.time = {"compute": compute, "pipeline_bubble": makespan - compute,
                "dp_total": dp_time, "dp_exposed": dp_exposed}
    est.step_time = makespan + dp_exposed
    est.model_flops_per_step = global_batch * (
        model.n_layers * cflops.training_flops_per_layer(model, 1, seq_len)
        + 3 * 2 * seq_len * h * V)
    if est.memory_bytes > dev.memory:
        est.problems.append(f"needs {est.memory_bytes / 1e9:.1f} GB per GPU on pipeline rank "
                            f"{r}, {(est.memory_bytes - dev.memory) / 1e9:.1f} GB over the "
                            f"{dev.memory / 1e9:.0f} GB of a {dev.name}")
    est.fits = not est.problems
    return est
