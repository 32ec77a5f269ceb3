"""Memory per GPU and time per step of one layout: :func:`evaluate`.

Every term comes from a module that owns it:

* weights, gradients, optimizer states: :func:`tpp.costs.zero.model_state_terms` on the
  parameters one rank holds (:func:`tpp.costs.memory.layer_params_per_rank` per layer; the
  vocabulary-parallel embedding and LM head split ``TP`` ways), ZeRO sharding over DP x CP;
  optimizer states in :func:`tpp.costs.zero.adam_state_bytes` per parameter (``moment_dtype``,
  ``master_weights``), gradients in ``grad_bytes``;
* activations: :func:`tpp.costs.memory.model_activation_terms` (Korthikanti et al. 2022
  generalised: the model's attention implementation, MLP kind and dropout, sequence parallelism
  on by default when TP > 1, the sequence split ``CP`` ways), weighted by the layers of each
  activation set a rank holds, at its peak, read from the simulated schedule
  (:meth:`tpp.pipeline.simulate.SimResult.peak_activation_bytes`, exact with uneven chunks);
  under full recomputation one layer's activations are re-materialised during its backward;
* ZeRO-3 gathered parameters: :func:`tpp.costs.zero.zero3_gather_buffer_bytes` over the rank's
  FSDP units (layers, embedding, LM head) at prefetch depth ``zero3_prefetch``, the running
  unit's unsharded gradient included; at ZeRO-2 (FSDP without resharding the weights) that
  unsharded gradient of the rank's largest unit is counted in ``gradients`` beside the shard,
  by the same rule (the unit's full gradient exists until it is reduce-scattered);
* a runtime reserve (CUDA context, NCCL buffers, each cited; ``fragmentation`` a share of the
  transient bytes for temporaries and allocator loss, default 0 as no measurement is cited,
  :data:`tpp.costs.memory.MEGATRON_OVERHEAD` for Megatron-LM's estimator's 5 %):
  :func:`tpp.costs.memory.runtime_reserve_terms`, with its sources;
* pipeline boundary tensors: none beyond the layers' own saved activations (the first layer's
  saved input is the received tensor); a stage's sent output is freed once sent, as Megatron-LM's
  ``deallocate_output_tensor`` (``megatron/core/pipeline_parallel/schedules.py``) and Llama 3
  (Dubey et al. 2024, Sec. 3.3.2) do;
* compute: :func:`tpp.costs.compute.layer_time`, kernel by kernel (GEMMs from their shapes at
  the GPU's measured matmul rate with wave quantization, flash or eager attention, element-wise
  work from its bytes), :func:`tpp.costs.compute.head_time` for the LM head and
  :func:`tpp.costs.compute.optimizer_step_time`; ``mfu=`` replaces it with the flat model
  (:func:`tpp.costs.flops.training_flops_per_layer` at that share of peak);
* TP collectives (:func:`tpp.costs.tp.tp_comm_time`, at the link's bus bandwidth): blocking
  by default (added to each layer's forward/backward); with ``tp_comm_overlap=True``
  (Megatron-LM's ``--tp-comm-overlap``) each layer's forward and backward are timed on the
  decomposed-TP timeline of :mod:`tpp.data_parallel.overlap` (:func:`tpp.planner.exposed.
  tp_layer_times`: collective matmul in TP chunks, contention included); CP all-gathers
  (:func:`tpp.collectives.alpha_beta_time`) are added to each stage's forward/backward time;
* the pipeline's makespan, bubble included, is the event simulation of the schedule
  (:func:`tpp.pipeline.simulate`) with those per-stage times and the boundary transfers;
* DP/ZeRO/HSDP: the heaviest rank's two-stream timeline of :mod:`tpp.data_parallel.overlap`
  (:func:`tpp.planner.exposed.dp_cost`): gradient buckets behind the backward, FSDP gathers
  prefetched, the distributed optimizer's gathers behind the next forward, compute slowed while
  NCCL holds SMs; what the compute stream waits for, plus that slowdown, is added to the step.

Not modelled: clock throttling, stragglers, kernel-launch gaps beyond a fixed cost per kernel,
contention between PP and DP traffic on the NIC (the pipeline is simulated apart).
Memory, the runtime reserve included, is compared with :attr:`tpp.hardware.GPU.capacity`, the
bytes the CUDA runtime reports (not the datasheet label) where a measurement is cited.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

from tpp import hardware
from tpp.collectives import alpha_beta_time, ring_steps
from tpp.costs import compute as ccomp
from tpp.costs import flops as cflops
from tpp.costs import memory as cmem
from tpp.costs import tp as ctp
from tpp.costs import zero as czero
from tpp.models import ModelConfig
from tpp.pipeline import schedule as build_schedule
from tpp.pipeline import simulate
from tpp.planner.exposed import dp_cost, tp_layer_times
from tpp.planner.layout import Layout, chunk_rank, layers_per_chunk, max_chunks

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
        if self.step_time is None:
            return (f"{head}: {self.memory_bytes / 1e9:.1f} GB per GPU ({mem}): "
                    + "; ".join(self.problems))
        t = ", ".join(f"{k} {v:.3f}" for k, v in self.time.items())
        verdict = "fits" if self.fits else "does not fit: " + "; ".join(self.problems)
        return (f"{head}: {self.memory_bytes / 1e9:.1f} GB per GPU ({mem}) of "
                f"{self.capacity / 1e9:.0f} GB, {verdict}; step {self.step_time:.2f} s ({t}), "
                f"MFU {self.mfu:.0%}")


def default_inter_link(gpu: str) -> str:
    """The scale-out link paired with a GPU preset: IB HDR for A100, NDR for H100/H200."""
    return "ib_hdr" if hardware.gpu(gpu).link == "nvlink3" else "ib_ndr"


def _structure_problems(model: ModelConfig, lay: Layout, gpus_per_node: int, seq_len: int,
                        global_batch: int, sp: bool | None = None,
                        tp_comm_overlap: bool = False) -> list[str]:
    p = []
    if tp_comm_overlap and lay.tp > 1 and not (lay.sp if sp is None else sp):
        p.append("tp_comm_overlap needs sequence parallelism (Megatron-LM asserts it: "
                 "megatron/training/arguments.py): set sequence_parallel=True or "
                 "tp_comm_overlap=False")
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
    if lay.pp * lay.virtual > max_chunks(model.n_layers):
        p.append(f"{lay.pp * lay.virtual} pipeline chunks (PP x v) for {model.n_layers} "
                 f"layers: more stages than the layers plus the embedding and the LM head "
                 f"({max_chunks(model.n_layers)} slots); lower PP or v")
    if seq_len % lay.cp or (lay.cp > 1 and seq_len % (2 * lay.cp)):
        p.append(f"CP={lay.cp} must split seq_len={seq_len} into 2 x CP equal chunks "
                 "(zig-zag balance)")
    elif lay.tp > 1 and (lay.sp if sp is None else sp) and (seq_len // lay.cp) % lay.tp:
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


@lru_cache(maxsize=4096)
def _layer_time(model, b, s, t, dev, sp, att, cp):
    return ccomp.layer_time(model, b, s, t, dev, sp=sp, attention=att, cp=cp)


@lru_cache(maxsize=4096)
def _head_time(model, b, s, t, dev):
    return ccomp.head_time(model, b, s, t, dev)


def _hsdp_shard(lay: Layout, gpus_per_node: int) -> int:
    """Ranks of one HSDP shard group: the DP x CP ranks inside one node (TP fastest)."""
    return max(1, min(lay.dp * lay.cp, gpus_per_node // lay.tp))


def _dp_times(lay: Layout, n_params: int, M: int, units: int, gpus_per_node: int,
              intra: hardware.Link, inter: hardware.Link) -> tuple[float, float]:
    """(all DP/ZeRO traffic time, the part that can never hide) of one step on one rank.

    One ring collective per layer (an FSDP unit or DDP bucket) at the link's bus bandwidth,
    each paying ``ring_steps x alpha``. ZeRO-1/2's weight all-gather after the update is the
    part that cannot hide. HSDP: ZeRO-3's collectives over the node's shard group on NVLink
    plus one all-reduce of the gradient shard across the replicas (inter-node) per step.
    """
    dp_n = lay.dp * lay.cp
    if dp_n == 1:
        return 0.0, 0.0

    def ring(n_par: int, n: int, stage: int, link: hardware.Link, m: int) -> float:
        byt = czero.dp_bytes_per_rank(n_par, n, stage, "bf16", m)
        ops = czero.dp_collectives(stage, m)
        return byt / link.bus_bandwidth + units * link.latency * sum(
            c * ring_steps(op, n) for op, c in ops.items())

    if lay.hsdp:
        shard = _hsdp_shard(lay, gpus_per_node)
        total = ring(n_params, shard, 3, intra, M) if shard > 1 else 0.0
        reps = dp_n // shard
        if reps > 1:
            total += ring(-(-n_params // shard), reps, 0, inter, 1)
        return total, 0.0
    link = inter if lay.nodes_spanned("dp", gpus_per_node) > 1 else intra
    total = ring(n_params, dp_n, lay.zero, link, M)
    after = 0.0
    if lay.zero in (1, 2):
        after = (czero.dp_bytes_per_rank(n_params, dp_n, 1, "bf16") / 2 / link.bus_bandwidth
                 + units * link.latency * ring_steps("all_gather", dp_n))
    return total, after


def _simulate(pp: int, m: int, v: int, t_f: tuple, t_b: tuple, transfer: float):
    sched = build_schedule("1f1b" if v == 1 else "interleaved", pp, m, v)
    res = simulate(sched, t_f=list(t_f), t_b=list(t_b), p2p_latency=transfer)
    return res.makespan, res.busy


@lru_cache(maxsize=1024)
def _held(pp: int, m: int, v: int, chunks: tuple | None = None):
    """Peak in-flight activation sets per rank and (with the layers of each chunk, ``chunks``)
    the peak of the layers' activations a rank holds at once, each set weighed by its own chunk.

    A set is held from the start of its F to the end of its B on one rank, and every rank runs
    its actions in the schedule's fixed order (:mod:`tpp.pipeline.simulate`), so these peaks
    depend on that order alone, not on the durations: they are read from one simulation at
    unit costs and cached per schedule (a test compares them with simulations at random
    costs), instead of once per layout's stage times. Past ``M = 2P`` they no longer change:
    the longest warm-up, rank 0's ``2 (P - 1) + (v - 1) P + 1`` chunk forwards, ends within
    the first ``2P`` microbatches' ``2 P v`` forwards, and each later group repeats the steady
    state (a test compares ``2P`` with up to ``6P`` at random chunk sizes), so the planner
    simulates ``min(M, 2P)`` microbatches for them (:func:`_held_microbatches`).
    """
    sched = build_schedule("1f1b" if v == 1 else "interleaved", pp, m, v)
    res = simulate(sched, t_f=1, t_b=1)
    return res.peak_inflight, (res.peak_activation_bytes(list(chunks)) if chunks else None)


def _held_layers(pp: int, m: int, v: int, chunks: tuple) -> list[int]:
    """The peak of the layers' activations each pipeline rank holds at once (``chunks``: the
    layers of each chunk), as :func:`_pipeline` returns it, without timing the schedule."""
    if pp == 1:
        return [sum(chunks)]
    return _held(pp, _held_microbatches(pp, m), v, chunks)[1]


def _sequence_parallel(lay: Layout, sequence_parallel: bool | None) -> bool:
    """Whether sequence parallelism is on: ``sequence_parallel``, by default when TP > 1."""
    return lay.tp > 1 and (lay.sp if sequence_parallel is None else sequence_parallel)


def _held_microbatches(pp: int, m: int) -> int:
    """The microbatches :func:`_held` simulates for ``m``: ``2P`` once ``m >= 2P``."""
    return 2 * pp if m >= 2 * pp else m


@lru_cache(maxsize=4096)
def _pipeline(pp: int, m: int, v: int, t_f: tuple, t_b: tuple, transfer: float,
              chunks: tuple | None = None):
    """Makespan, busy time per rank, peak in-flight activation sets per rank and (with the
    layers of each chunk, ``chunks``) the peak of the layers' activations a rank holds at once,
    each set weighed by its own chunk (cached; the peaks from :func:`_held`).

    Past ``M = 6 P`` both schedules are in their steady state (with uneven stages the
    interleaved one needs about four groups of ``P`` to settle): one more group of ``P``
    microbatches adds the same time, so the makespan is extrapolated linearly from simulations
    at ``5P`` and ``6P`` (tests compare it with full simulations); busy time is exactly linear
    in ``M`` and the peak in-flight count no longer changes.
    """
    if pp == 1:
        busy = m * (t_f[0] + t_b[0])
        return busy, [busy], [1], ([sum(chunks)] if chunks else None)
    if m <= 6 * pp:
        return (*_simulate(pp, m, v, t_f, t_b, transfer),
                *_held(pp, _held_microbatches(pp, m), v, chunks))
    t5, _ = _simulate(pp, 5 * pp, v, t_f, t_b, transfer)
    t6, busy6 = _simulate(pp, 6 * pp, v, t_f, t_b, transfer)
    makespan = t6 + (t6 - t5) * (m - 6 * pp) / pp
    return (makespan, [b * m / (6 * pp) for b in busy6],
            *_held(pp, _held_microbatches(pp, m), v, chunks))


def _rank_params(model: ModelConfig, lay: Layout
                 ) -> tuple[list[int], list[int], int, int, int, list[int]]:
    """Layers of each pipeline chunk, layers of each pipeline rank (chunk ``c`` sits on rank
    ``c mod P``), the parameters of one layer on a rank, of the first stage's embedding, of the
    last stage's LM head, and the parameters each pipeline rank holds."""
    t, P = lay.tp, lay.pp
    chunks = layers_per_chunk(model.n_layers, P * lay.virtual)
    layers = [sum(chunks[r::P]) for r in range(P)]
    h, V = model.d_model, model.vocab_size
    layer_p = cmem.layer_params_per_rank(model, t, replicate_kv=t > model.n_kv_heads)
    emb = -(-V // t) * h
    first = emb + model.learned_positions * h
    last = model.norm_params + emb  # LM head (a copy of the tied embedding when tied)
    params = [layers[r] * layer_p for r in range(P)]
    params[0] += first
    params[P - 1] += last if P > 1 else (0 if model.tied_embeddings else emb) + model.norm_params
    return chunks, layers, layer_p, first, last, params


def _rank_terms(r: int, P: int, params_r: int, activations: int, rematerialised: int,
                layers_r: int, layer_p: int, first: int, last: int, model: ModelConfig,
                lay: Layout, b: int, s: int, t: int, shard_n: int, grad_bytes: int,
                optimizer_bytes: int, zero3_prefetch: int, runtime_reserve: bool,
                communicators: int, fragmentation) -> dict[str, int]:
    """The memory terms of pipeline rank ``r`` (bytes), see :func:`evaluate`."""
    terms = czero.model_state_terms(params_r, shard_n, lay.zero, grad_bytes=grad_bytes,
                                    optimizer_bytes=optimizer_bytes)
    terms["activations"] = activations
    terms["recompute_buffer"] = rematerialised
    terms["logits"] = 4 * b * s * -(-model.vocab_size // t) if r == P - 1 else 0
    units = [layer_p] if layers_r else []
    units += [first] if r == 0 else []
    units += [last - model.norm_params] if r == P - 1 and (
        P > 1 or not model.tied_embeddings) else []
    terms["zero3_gathered"] = (czero.zero3_gather_buffer_bytes(
        units or [0], zero3_prefetch, 2, grad_bytes) if lay.zero == 3 else 0)
    if lay.zero == 2 and shard_n > 1:  # the running unit's full gradient before its RS
        terms["gradients"] += max(units or [0]) * grad_bytes
    transient = sum(terms[k] for k in ("activations", "recompute_buffer", "logits",
                                        "zero3_gathered"))
    terms["runtime_reserve"] = (cmem.runtime_reserve_bytes(transient, communicators,
                                                           fragmentation=fragmentation)
                                if runtime_reserve else 0)
    return terms


def _heaviest_rank_memory(model: ModelConfig, lay: Layout, s: int, sp: bool, layers: list[int],
                          layer_p: int, first: int, last: int, params: list[int],
                          held_layers: list[int], shard_n: int, attention: str | None,
                          dropout: bool | None, grad_bytes: int, optimizer_bytes: int,
                          zero3_prefetch: int, runtime_reserve: bool, fragmentation: float
                          ) -> tuple[int, int, dict[str, int]]:
    """(bytes, rank, terms) of the pipeline rank that needs the most memory (the first of the
    heaviest): :func:`_rank_terms` of each rank, with ``held_layers[r]`` layers' activations at
    its peak (:func:`_held`) and ``s`` tokens per CP rank, see :func:`evaluate`."""
    P, b, t = lay.pp, lay.microbatch_size, lay.tp
    recipe = {"attention": attention, "dropout": dropout}
    act_layer = sum(cmem.model_activation_terms(model, s, b, t, sp, lay.recompute,
                                                **recipe).values())
    # full recomputation re-materialises one layer's activations during its backward
    rematerialised = (sum(cmem.model_activation_terms(model, s, b, t, sp, "none",
                                                      **recipe).values())
                      if lay.recompute == "full" else 0)
    communicators = sum(d > 1 for d in (lay.tp, lay.cp, lay.pp, lay.dp))
    best, seen = None, {}
    for r in range(P):
        # ranks alike in what they hold have the same terms: compute each kind once
        kind = (params[r], held_layers[r], layers[r] > 0, r == 0, r == P - 1)
        if kind not in seen:
            seen[kind] = _rank_terms(r, P, params[r], held_layers[r] * act_layer,
                                     rematerialised, layers[r], layer_p, first, last,
                                     model, lay, b, s, t, shard_n, grad_bytes, optimizer_bytes,
                                     zero3_prefetch, runtime_reserve, communicators,
                                     fragmentation)
        terms = seen[kind]
        total = sum(terms.values())
        if best is None or total > best[0]:
            best = (total, r, dict(terms))
    return best


def _check_case(model: ModelConfig, layout: Layout, seq_len: int, global_batch: int,
                gpus_per_node: int) -> None:
    """Validate the model, layout and sizes every entry point takes."""
    if not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a tpp.models.ModelConfig, got {type(model).__name__}: "
                         "use tpp.models.model('llama3_405b')")
    if not isinstance(layout, Layout):
        raise ValueError("layout must be a tpp.planner.Layout")
    for name, v in (("seq_len", seq_len), ("global_batch", global_batch),
                    ("gpus_per_node", gpus_per_node)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be an int >= 1")


def _check_memory_options(attention, dropout, sequence_parallel, moment_dtype, master_weights,
                          grad_bytes, zero3_prefetch, runtime_reserve) -> int:
    """Validate :func:`evaluate`'s memory options; return the optimizer bytes per parameter."""
    if attention is not None and attention not in cmem.ATTENTION:
        raise ValueError(f"attention={attention!r}: use 'flash', 'eager' or None (the model's "
                         "own recipe)")
    for name, v in (("dropout", dropout), ("sequence_parallel", sequence_parallel)):
        if v is not None and not isinstance(v, bool):
            raise ValueError(f"{name}={v!r} must be True, False or None (None: the default, "
                             "the model's recipe / SP on when TP > 1)")
    if not isinstance(runtime_reserve, bool):
        raise ValueError(f"runtime_reserve={runtime_reserve!r} must be True or False")
    for name, v, low in (("grad_bytes", grad_bytes, 0), ("zero3_prefetch", zero3_prefetch, 1)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"{name}={v!r} must be an int >= {low}")
    return czero.adam_state_bytes(moment_dtype, master_weights)


@dataclass(frozen=True)
class RankMemory:
    """What the memory of a layout's pipeline ranks needs once the schedule's peaks are known
    (:func:`memory_step` prepares it; :meth:`fill` writes the heaviest rank's terms)."""

    model: ModelConfig
    layout: Layout
    tokens: int            # tokens per CP rank
    sp: bool               # sequence parallelism on
    chunks: list[int]      # layers of each pipeline chunk
    layer_p: int           # parameters of one layer on a rank
    first: int             # the first stage's embedding parameters
    last: int              # the last stage's LM head (and final norm) parameters
    params: list[int]      # parameters of each pipeline rank
    shard_n: int           # ranks a ZeRO shard group spans
    attention: str | None
    dropout: bool | None
    grad_bytes: int
    optimizer_bytes: int
    zero3_prefetch: int
    runtime_reserve: bool
    fragmentation: float

    def held_layers(self, microbatches: int) -> list[int]:
        """The peak of the layers' activations each pipeline rank holds (:func:`_held_layers`:
        the schedule at unit costs; the timed simulation of :func:`evaluate` gives the same)."""
        lay = self.layout
        return _held_layers(lay.pp, microbatches, lay.virtual, tuple(self.chunks))

    def fill(self, est: Estimate, held_layers: list[int]) -> None:
        """Set ``est.memory_bytes``, ``heaviest_rank`` and ``memory`` (the heaviest rank's
        terms, :func:`_heaviest_rank_memory`) with ``held_layers[r]`` layers' activations at
        rank ``r``'s peak."""
        est.memory_bytes, est.heaviest_rank, est.memory = _heaviest_rank_memory(
            self.model, self.layout, self.tokens, self.sp, est.layers, self.layer_p,
            self.first, self.last, self.params, held_layers, self.shard_n, self.attention,
            self.dropout, self.grad_bytes, self.optimizer_bytes, self.zero3_prefetch,
            self.runtime_reserve, self.fragmentation)


def memory_step(model: ModelConfig, layout: Layout, *, gpu: str, gpus_per_node: int,
                seq_len: int, global_batch: int, attention: str | None, dropout: bool | None,
                sequence_parallel: bool | None, moment_dtype: str, master_weights: bool,
                grad_bytes: int, zero3_prefetch: int, runtime_reserve: bool,
                fragmentation: float, tp_comm_overlap: bool = False,
                check_timing_options: Callable[[], None] | None = None
                ) -> tuple[Estimate, hardware.GPU, RankMemory | None]:
    """The opening of :func:`evaluate` and of :func:`tpp.planner.memory_table.evaluate_memory`
    (same arguments, same meaning): check the case (``check_timing_options``, ``evaluate``'s
    checks of its own arguments, right after the model's and the layout's) and the memory
    options, resolve the GPU, find the structural rules the layout breaks and, when it breaks
    none, the parameters of each pipeline rank (:func:`_rank_params`).

    Returns the estimate (``problems``; ``microbatches`` and ``layers`` when there are none),
    the GPU, and the :class:`RankMemory` to fill once the schedule's peaks are known (``None``
    when the layout breaks a rule: then no memory is computed).
    """
    _check_case(model, layout, seq_len, global_batch, gpus_per_node)
    if check_timing_options is not None:
        check_timing_options()
    optimizer_bytes = _check_memory_options(attention, dropout, sequence_parallel, moment_dtype,
                                            master_weights, grad_bytes, zero3_prefetch,
                                            runtime_reserve)
    cmem.runtime_reserve_terms(0, 0, fragmentation=fragmentation)  # raises on a bad share
    dev = hardware.gpu(gpu)
    lay = layout
    est = Estimate(lay, False, _structure_problems(model, lay, gpus_per_node, seq_len,
                                                   global_batch, sequence_parallel,
                                                   tp_comm_overlap),
                   capacity=dev.capacity, peak_flops=dev.peak_flops_bf16)
    if est.problems:
        return est, dev, None
    est.microbatches = global_batch // (lay.dp * lay.microbatch_size)
    chunks, est.layers, layer_p, first, last, params = _rank_params(model, lay)
    shard_n = _hsdp_shard(lay, gpus_per_node) if lay.hsdp else lay.dp * lay.cp
    return est, dev, RankMemory(
        model, lay, seq_len // lay.cp, _sequence_parallel(lay, sequence_parallel), chunks,
        layer_p, first, last, params, shard_n, attention, dropout, grad_bytes, optimizer_bytes,
        zero3_prefetch, runtime_reserve, fragmentation)


def _check_timing_options(layout: Layout, gpus: int | None, tp_comm_overlap: bool,
                          mfu: float | None, attention_kernel: str | None) -> None:
    """Validate the options of :func:`evaluate` that only its timing reads."""
    if gpus is not None and gpus != layout.gpus:
        raise ValueError(f"layout {layout} uses TP x CP x PP x DP = {layout.gpus} GPUs, not "
                         f"{gpus}: change a degree so the product is {gpus}")
    if not isinstance(tp_comm_overlap, bool):
        raise ValueError(f"tp_comm_overlap={tp_comm_overlap!r} must be True or False")
    if mfu is not None and not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1], or None for the kernel-level model")
    if attention_kernel not in (None, *ccomp.ATTENTION):
        raise ValueError(f"attention_kernel={attention_kernel!r}: use 'flash2' or 'flash3' "
                         "(fused, no s x s scores) or 'eager' (scores materialised)")



def evaluate(model: ModelConfig, layout: Layout, *, gpu: str = "h100_sxm",
             gpus_per_node: int = 8, seq_len: int, global_batch: int,
             mfu: float | None = None, attention_kernel: str | None = None,
             dp_overlap: bool = True, inter_link: str | None = None, gpus: int | None = None,
             time_bound: float | None = None, attention: str | None = None,
             dropout: bool | None = None, sequence_parallel: bool | None = None,
             moment_dtype: str = "fp32", master_weights: bool = True, grad_bytes: int = 2,
             zero3_prefetch: int = 2, runtime_reserve: bool = True,
             memory_first: bool = False, tp_comm_overlap: bool = False,
             fragmentation: float = cmem.FRAGMENTATION) -> Estimate:
    """Memory per GPU (heaviest pipeline rank), step time and every violated rule of ``layout``.

    ``seq_len`` tokens per sequence; ``global_batch`` and ``layout.microbatch_size`` count
    sequences. Compute is timed kernel by kernel (:mod:`tpp.costs.compute`: each GEMM from its
    shape; ``attention_kernel`` "flash2" (FlashAttention-2, the default with flash attention),
    "flash3" or "eager" (the default with ``attention="eager"``); element-wise work from its
    bytes);
    ``mfu=x`` instead runs every FLOP at ``x`` times the peak (the old flat model).
    ``dp_overlap=False``: the gradient reduction waits for the backward (Megatron-LM 2021).
    ``tp_comm_overlap=True``: TP collectives overlapped with the GEMMs (Megatron-LM's
    ``--tp-comm-overlap``, TransformerEngine's userbuffers; needs sequence parallelism), timed
    by :func:`tpp.planner.exposed.tp_layer_times`; default False: blocking.
    ``gpu`` a
    :mod:`tpp.hardware` preset (its NVLink carries TP and CP inside a node), ``inter_link`` the
    network between nodes (default :func:`default_inter_link`). ``gpus``, when given, must equal
    ``layout.gpus``. ``time_bound`` (seconds): when the busiest rank's compute alone, a lower
    bound of the step time, exceeds it, stop before simulating the pipeline and return an
    estimate with ``step_time=None``, that bound in ``time["compute_lower_bound"]`` and the
    reason in ``problems`` (the search uses it to skip layouts that cannot win).

    Memory options: ``attention`` ("flash" / "eager") and ``dropout`` default to the model's
    recipe (``model.attention``, ``model.dropout``); ``sequence_parallel`` defaults to on when
    TP > 1; ``moment_dtype`` ("fp32" / "bf16") and ``master_weights`` set the optimizer bytes
    (:func:`tpp.costs.zero.adam_state_bytes`), ``grad_bytes`` the gradient bytes (4 for
    Megatron's fp32 main gradients); ``zero3_prefetch`` the FSDP units gathered at once;
    ``runtime_reserve=False`` drops the CUDA-context / NCCL reserve; ``fragmentation`` the
    share of the transient bytes charged for temporaries and allocator loss (default
    :data:`tpp.costs.memory.FRAGMENTATION`, 0; :data:`~tpp.costs.memory.MEGATRON_OVERHEAD` for
    Megatron-LM's estimator's 5 %).
    ``memory_first=True``: a layout over the GPU's memory returns without its data-parallel
    timeline (``step_time=None``; the search uses it).
    """
    est, dev, mem = memory_step(
        model, layout, gpu=gpu, gpus_per_node=gpus_per_node, seq_len=seq_len,
        global_batch=global_batch, attention=attention, dropout=dropout,
        sequence_parallel=sequence_parallel, moment_dtype=moment_dtype,
        master_weights=master_weights, grad_bytes=grad_bytes, zero3_prefetch=zero3_prefetch,
        runtime_reserve=runtime_reserve, fragmentation=fragmentation,
        tp_comm_overlap=tp_comm_overlap,
        check_timing_options=lambda: _check_timing_options(layout, gpus, tp_comm_overlap, mfu,
                                                           attention_kernel))
    intra = hardware.link(dev.link)
    inter = hardware.link(inter_link or default_inter_link(gpu))
    if mem is None:
        return est
    lay = layout
    t, P, v, b = lay.tp, lay.pp, lay.virtual, lay.microbatch_size
    s = seq_len // lay.cp
    M = est.microbatches
    chunks, layer_p, first, params = mem.chunks, mem.layer_p, mem.first, mem.params
    h, V = model.d_model, model.vocab_size
    # -- time of one microbatch per chunk --------------------------------------------------------
    sp = mem.sp
    mem_att = attention or model.attention
    att = attention_kernel or ("eager" if mem_att == "eager" else "flash2")
    if (att == "eager") != (mem_att == "eager"):
        raise ValueError(f"attention_kernel={att!r} with attention={mem_att!r}: a flash kernel "
                         "keeps no s x s scores and an eager one does; make them agree")
    if mfu is not None:  # the old flat-MFU model, on request
        peak = dev.peak_flops_bf16 * mfu
        f_l = cflops.forward_flops_per_layer(model, b, seq_len) / (t * lay.cp) / peak
        tr_l = cflops.training_flops_per_layer(model, b, seq_len, lay.recompute) / (
            t * lay.cp) / peak
        b_l = tr_l - f_l
        hf = 2 * b * seq_len * h * V / (t * lay.cp) / peak
        hb = 2 * hf
    else:
        lt = _layer_time(model, b, seq_len, t, dev, sp, att, lay.cp)
        f_l = lt.forward
        b_l = lt.backward + {"none": 0.0, "full": lt.forward,
                             "selective": lt.attention_f if att == "eager" else 0.0
                             }[lay.recompute]
        hf, hb = _head_time(model, b, s, t, dev)
    tp_bw = intra.bus_bandwidth
    tp_f = ctp.tp_comm_time(b, s, h, t, tp_bw, intra.latency, 1, "forward",
                            sp) if t > 1 else 0.0
    tp_b = ctp.tp_comm_time(b, s, h, t, tp_bw, intra.latency, 1, "step", sp,
                            recompute=lay.recompute) - tp_f if t > 1 else 0.0
    cp_link = intra if lay.nodes_spanned("cp", gpus_per_node) == 1 else inter
    kv = 2 * b * seq_len * cmem.kv_heads_per_rank(model.n_kv_heads, t) * model.d_head * 2
    cp_f = alpha_beta_time("all_gather", kv, lay.cp, cp_link.bus_bandwidth, cp_link.latency)
    f_tp, b_tp = (tp_layer_times(f_l, b_l, tp_f, tp_b, t, intra, tp_comm_overlap) if t > 1
                  else (f_l, b_l))
    t_f, t_b = [], []
    for c, n in enumerate(chunks):
        last_chunk = c == len(chunks) - 1
        t_f.append(n * (f_tp + cp_f) + (hf if last_chunk else 0.0))
        t_b.append(n * (b_tp + 2 * cp_f) + (hb if last_chunk else 0.0))
    lower = M * max(sum(t_f[q::P]) + sum(t_b[q::P]) for q in range(P))  # chunk c on c % P
    if time_bound is not None and lower > time_bound:
        est.time = {"compute_lower_bound": lower}
        est.problems.append(f"compute alone takes {lower:.3f} s > time_bound={time_bound} s")
        return est
    pp_link = inter if lay.nodes_spanned("pp", gpus_per_node) > 1 else intra
    boundary = b * s * h * 2 // t  # scatter-gather: each TP rank sends 1/t (Narayanan 2021)
    transfer = alpha_beta_time("send", boundary, 2, pp_link.bus_bandwidth, pp_link.latency) \
        if P > 1 else 0.0
    makespan, busy, inflight, held_layers = _pipeline(P, M, v, tuple(t_f), tuple(t_b), transfer,
                                                      tuple(chunks))
    # -- memory of each pipeline rank ----------------------------------------------------------
    mem.fill(est, held_layers)
    shard_n = mem.shard_n
    r = est.heaviest_rank
    if memory_first and est.memory_bytes > dev.capacity:
        est.problems.append(_over(est.memory_bytes, r, dev))
        return est
    # -- data parallelism ----------------------------------------------------------------------
    mine = [c for c in range(len(chunks)) if chunk_rank(c, P) == r]
    # one unit per layer; a chunk with no layer (the embedding or the head alone, see
    # layout.max_chunks) is one unit of its own time that holds no layer weights
    lf = [t_f[c] / max(chunks[c], 1) for c in mine for _ in range(max(chunks[c], 1))]
    lb = [t_b[c] / max(chunks[c], 1) for c in mine for _ in range(max(chunks[c], 1))]
    nbytes = [2 * layer_p * (chunks[c] > 0) for c in mine for _ in range(max(chunks[c], 1))]
    nbytes[0] += 2 * (first if r == 0 else 0)
    nbytes[-1] += 2 * (params[r] - layer_p * est.layers[r] - (first if r == 0 else 0))
    opt = ccomp.optimizer_step_time(-(-params[r] // (shard_n if lay.zero else 1)), dev)
    if lay.hsdp:  # ZeRO-3 inside the node, then one all-reduce of the shard across nodes
        dp_exposed, dp_time = dp_cost(lf, lb, M, 3, shard_n, nbytes, intra, "nvlink",
                                      dp_overlap)
        reps = lay.dp * lay.cp // shard_n
        if reps > 1:
            ar, _ = _dp_times(Layout(dp=reps), -(-params[r] // shard_n), 1, len(lf),
                              gpus_per_node, inter, inter)
            dp_time += ar
            dp_exposed += max(0.0, ar - (sum(lb) if dp_overlap else 0.0))
    else:
        dp_link = inter if lay.nodes_spanned("dp", gpus_per_node) > 1 else intra
        dp_exposed, dp_time = dp_cost(lf, lb, M, lay.zero, lay.dp * lay.cp, nbytes, dp_link,
                                      "nic" if dp_link is inter else "nvlink", dp_overlap)
    compute = max(busy)
    est.time = {"compute": compute, "pipeline_bubble": makespan - compute,
                "dp_total": dp_time, "dp_exposed": dp_exposed, "optimizer": opt}
    # the timeline's DP cost is measured against its own compute, which includes the
    # optimizer step; the step adds the optimizer once
    est.step_time = makespan + dp_exposed + opt
    est.model_flops_per_step = global_batch * (
        model.n_layers * cflops.training_flops_per_layer(model, 1, seq_len)
        + 3 * 2 * seq_len * h * V)
    if est.memory_bytes > dev.capacity:
        est.problems.append(_over(est.memory_bytes, r, dev))
    est.fits = not est.problems
    return est


def _over(need: int, r: int, dev: hardware.GPU) -> str:
    return (f"needs {need / 1e9:.1f} GB per GPU on pipeline rank {r}, "
            f"{(need - dev.capacity) / 1e9:.1f} GB over the {dev.capacity / 1e9:.1f} GB a "
            f"process can allocate on a {dev.name} (hardware.GPU.capacity)")
