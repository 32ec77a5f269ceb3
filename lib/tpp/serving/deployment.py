"""Serving layouts: prefill vs decode, and what TP, PP and DP replicas each buy.

Built on :func:`tpp.serving.decode_step` (one rule, one place: the decode step's bytes, FLOPs and
all-reduces live there) and :mod:`tpp.costs` (FLOPs, pipeline point-to-point time):

* :func:`prefill_step` — a prompt of ``prompt_len`` tokens for ``batch`` sequences in one pass:
  FLOPs from :func:`tpp.costs.flops.forward_flops_per_layer`, bytes = the weight shard; its
  arithmetic intensity (FLOPs per byte read) is ~``batch * prompt_len`` where decode's is
  ~``batch``, which is why prefill is compute-bound and decode memory-bound.
* :func:`serving_layout` — TP x PP x DP. Each of the ``pp`` stages is a decode step of ``L/pp``
  layers on ``tp`` GPUs; ``microbatches`` groups of requests flow through the stages.
  :func:`decode_rounds` simulates the autoregressive pipeline event by event (a microbatch's next
  token enters stage 0 only when its previous token has left the last stage); the steady-state
  time per round comes out as ``max(m t_stage, p t_stage + (p-1) t_p2p)``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tpp.costs.flops import forward_flops_per_layer
from tpp.costs.pipeline import p2p_time
from tpp.costs.tp import ring_factor
from tpp.hardware import bytes_per_element
from tpp.models import ModelConfig
from tpp.serving.decode import DecodeStep, decode_step
from tpp.serving.inputs import check_positive_ints, resolve_gpu, resolve_link, resolve_model

__all__ = ["PrefillStep", "prefill_step", "decode_intensity", "decode_rounds", "ServingLayout",
           "serving_layout"]


@dataclass(frozen=True)
class PrefillStep:
    """One prefill pass (``batch`` prompts of ``prompt_len`` tokens) on ``tp`` GPUs."""

    tp: int
    batch: int
    prompt_len: int
    flops_per_gpu: float
    bytes_read_per_gpu: float
    compute_time: float
    memory_time: float
    allreduce_time: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte of HBM read (weights only)."""
        return self.flops_per_gpu / self.bytes_read_per_gpu

    @property
    def compute_bound(self) -> bool:
        return self.compute_time > self.memory_time

    @property
    def step_time(self) -> float:
        """Roofline ``max(compute, memory)`` plus the all-reduces (no overlap)."""
        return max(self.compute_time, self.memory_time) + self.allreduce_time


def prefill_step(model_cfg: ModelConfig | str, tp: int, batch: int, prompt_len: int,
                 interconnect="nvlink4", accelerator="h100_sxm", *, dtype: str = "bf16",
                 mfu: float = 1.0) -> PrefillStep:
    """Prefill of ``batch`` prompts: ``L * forward_flops_per_layer(b, s)`` FLOPs (matmuls and
    the ``4 b s^2 h`` attention scores), split over ``tp`` GPUs; each GPU reads its weight shard
    once; ``2 L`` all-reduces of ``b s d e`` bytes each, ring factor ``2(t-1)/t``."""
    check_positive_ints(prompt_len=prompt_len)
    m = resolve_model(model_cfg)
    g = resolve_gpu(accelerator)
    ln = resolve_link(interconnect)
    # the decode step of the same layout gives the weight shard and validates tp and batch
    ref = decode_step(m, tp, batch, ln, g, dtype=dtype)
    flops = m.n_layers * forward_flops_per_layer(m, batch, prompt_len) / tp
    payload = batch * prompt_len * m.d_model * bytes_per_element(dtype)
    ar = 2 * m.n_layers * float(ring_factor("all_reduce", tp)) * payload / ln.bandwidth
    return PrefillStep(tp=tp, batch=batch, prompt_len=prompt_len, flops_per_gpu=float(flops),
                       bytes_read_per_gpu=float(ref.weight_bytes_per_gpu),
                       compute_time=float(flops) / (g.peak_flops_bf16 * mfu),
                       memory_time=ref.weight_bytes_per_gpu / g.memory_bandwidth,
                       allreduce_time=float(ar))


def decode_intensity(step: DecodeStep) -> float:
    """FLOPs per byte read of a decode step: ``2 N batch / tp`` over the bytes each GPU reads
    (weights + KV cache). About ``batch`` for bf16 weights and no cache."""
    flops = step.compute_time * step.assumptions["peak_flops"] * step.assumptions["mfu"]
    return flops / step.memory_bytes_per_gpu


def decode_rounds(pp: int, microbatches: int, t_stage: float, t_p2p: float = 0.0,
                  tokens: int = 8) -> list[float]:
    """Event-driven autoregressive pipeline: the times at which each round of tokens completes.

    ``microbatches`` groups of requests; each token of a group passes stages 0..pp-1 in order
    (``t_stage`` each, ``t_p2p`` per boundary), a stage runs one group at a time (first come,
    first served), and a group's next token enters stage 0 only after its previous token left
    the last stage. Returns the completion time of round k (all groups' token k), k = 1..tokens.
    """
    check_positive_ints(pp=pp, microbatches=microbatches, tokens=tokens)
    free = [0.0] * pp                   # when each stage is next free
    ready = [0.0] * microbatches        # when each group's next token may enter stage 0
    rounds = []
    for _ in range(tokens):
        done = 0.0
        for j in range(microbatches):   # groups enter stage 0 in order
            t = ready[j]
            for s in range(pp):
                start = max(t, free[s])
                free[s] = start + t_stage
                t = free[s] + (t_p2p if s < pp - 1 else 0.0)
            ready[j] = t
            done = max(done, t)
        rounds.append(done)
    return rounds


@dataclass(frozen=True)
class ServingLayout:
    """``dp`` replicas, each ``pp`` stages of ``tp`` GPUs, serving ``batch`` sequences per replica
    in ``microbatches`` groups. ``stage`` is the decode step of one stage for one group."""

    tp: int
    pp: int
    dp: int
    batch: int
    microbatches: int
    stage: DecodeStep
    p2p_time: float
    round_time: float

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def memory_bytes_per_gpu(self) -> int:
        """Weights of ``L/pp`` layers over ``tp`` GPUs + their KV cache for the whole replica
        batch (all ``microbatches`` groups stay resident)."""
        return self.stage.weight_bytes_per_gpu + self.stage.kv_bytes_per_gpu * self.microbatches

    @property
    def fits(self) -> bool:
        return self.memory_bytes_per_gpu <= self.stage.gpu_memory_bytes

    @property
    def overflow_bytes(self) -> int:
        return max(0, self.memory_bytes_per_gpu - self.stage.gpu_memory_bytes)

    @property
    def token_latency(self) -> float:
        """Seconds between two tokens of one sequence (a round: every group advances once)."""
        return self.round_time

    @property
    def tokens_per_second(self) -> float:
        """Tokens per second over all ``dp`` replicas."""
        return self.dp * self.batch / self.round_time

    @property
    def bubble_fraction(self) -> float:
        """Share of a stage's time idle in steady state: ``1 - m t_stage / round_time``."""
        return 1 - self.microbatches * self.stage.step_time / self.round_time


def serving_layout(model_cfg: ModelConfig | str, tp: int, pp: int = 1, dp: int = 1,
                   batch: int = 16, microbatches: int = 1, interconnect="nvlink4",
                   pp_interconnect="ib_ndr", accelerator="h100_sxm", *, context_len: int = 0,
                   n_params: float | None = None, dtype: str = "bf16", **kwargs) -> ServingLayout:
    """A TP x PP x DP serving layout; ``kwargs`` go to :func:`tpp.serving.decode_step`.

    Stage = ``L/pp`` layers and ``N/pp`` parameters (``pp`` must divide ``L``); a group holds
    ``batch/microbatches`` sequences (must divide). The round time comes from
    :func:`decode_rounds` (steady state, after the pipeline has filled).
    """
    m = resolve_model(model_cfg)
    check_positive_ints(pp=pp, dp=dp, batch=batch, microbatches=microbatches)
    if m.n_layers % pp:
        raise ValueError(f"pp={pp} must divide n_layers={m.n_layers}: pick a divisor")
    if batch % microbatches:
        raise ValueError(f"microbatches={microbatches} must divide batch={batch}")
    n = m.params if n_params is None else n_params
    stage_model = dataclasses.replace(m, n_layers=m.n_layers // pp, name=f"{m.name}/pp{pp}")
    b = batch // microbatches
    stage = decode_step(stage_model, tp, b, interconnect, accelerator, n_params=n / pp,
                        context_len=context_len, dtype=dtype, **kwargs)
    ln = resolve_link(pp_interconnect)
    hop = p2p_time(int(b * m.d_model * bytes_per_element(dtype)), ln.bandwidth) if pp > 1 else 0.0
    rounds = decode_rounds(pp, microbatches, stage.step_time, hop, tokens=pp + 3)
    return ServingLayout(tp=tp, pp=pp, dp=dp, batch=batch, microbatches=microbatches,
                         stage=stage, p2p_time=hop, round_time=rounds[-1] - rounds[-2])
