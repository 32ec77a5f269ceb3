"""The decode-step cost model of tensor-parallel serving.

One decode step generates one token for each of ``batch`` sequences. Under TP degree ``t``:

    T(t) = max-or-sum( weight_bytes / (t * B_mem)  [+ KV-cache bytes / (t_kv * B_mem)],
                       2 N batch / (t * F_peak) )                    (compute, optional roofline)
         + n_ar * ( steps(t) * alpha + rf(t) * P / B_link )           (TP all-reduces)

with ``P = batch * d * e`` bytes per all-reduce (one token per sequence), ``n_ar = 2 L`` (two
all-reduces per layer, after attention and after the MLP), ``rf(t) = 2 (t-1)/t`` the ring factor
and ``steps(t) = 2 (t-1)``. Every assumption is a named parameter of :func:`decode_step`, with
defaults that match the serving lesson's text (weights only, memory-bound, no latency); the
:class:`DecodeStep` it returns keeps them in ``assumptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from tpp.costs.algorithms import all_reduce_cost
from tpp.hardware import GPU, Link, bytes_per_element
from tpp.models import ModelConfig
from tpp.serving.inputs import check_positive_ints, resolve_gpu, resolve_link, resolve_model
from tpp.tensor_parallel.attention import attention_split

__all__ = ["DecodeStep", "decode_step", "scaling_curve", "crossover_bandwidth",
           "best_tp_degree"]

COMPUTE_MODELS = ("memory", "roofline")


@dataclass(frozen=True)
class DecodeStep:
    """One decode step under TP degree ``tp`` (bytes are ints, times in seconds)."""

    tp: int
    batch: int
    weight_bytes_per_gpu: int
    kv_bytes_per_gpu: int
    memory_time: float
    compute_time: float
    compute_bound: bool
    allreduce_payload_bytes: int
    allreduces_per_step: int
    allreduce_payload_per_step: int
    allreduce_sent_per_gpu: int
    allreduce_bandwidth_time: float
    allreduce_latency_time: float
    gpu_memory_bytes: int = 0
    assumptions: dict = field(default_factory=dict)

    @property
    def memory_bytes_per_gpu(self) -> int:
        """Bytes each GPU must hold: its weight shard plus its share of the KV cache."""
        return self.weight_bytes_per_gpu + self.kv_bytes_per_gpu

    @property
    def fits(self) -> bool:
        """Whether weights + KV cache fit in one GPU's memory (activations and workspace ignored,
        so a layout that does not fit here cannot run at all)."""
        return self.memory_bytes_per_gpu <= self.gpu_memory_bytes

    @property
    def overflow_bytes(self) -> int:
        """Bytes by which weights + KV cache exceed the GPU's memory (0 if they fit)."""
        return max(0, self.memory_bytes_per_gpu - self.gpu_memory_bytes)

    @property
    def work_time(self) -> float:
        """Time spent on the GPU's own work (reading weights / computing)."""
        if self.assumptions.get("compute_model") == "roofline":
            return max(self.memory_time, self.compute_time)
        return self.memory_time

    @property
    def allreduce_time(self) -> float:
        return self.allreduce_bandwidth_time + self.allreduce_latency_time

    @property
    def step_time(self) -> float:
        """Seconds per decode step (``work_time + allreduce_time``, no overlap)."""
        return self.work_time + self.allreduce_time

    @property
    def tokens_per_second(self) -> float:
        """Generated tokens per second for the whole batch."""
        return self.batch / self.step_time


def decode_step(
    model_cfg: ModelConfig | str,
    tp: int,
    batch: int,
    interconnect: Link | str = "nvlink4",
    accelerator: GPU | str = "h100_sxm",
    *,
    dtype: str = "bf16",
    n_params: float | None = None,
    memory_bandwidth: float | None = None,
    link_bandwidth: float | None = None,
    bidirectional: bool = False,
    latency: float = 0.0,
    ring: bool = True,
    allreduces_per_layer: int = 2,
    compute_model: str = "memory",
    mfu: float = 1.0,
    context_len: int = 0,
    replicate_kv: bool = True,
    algorithm: str = "ring",
) -> DecodeStep:
    """Time of one decode step of ``model_cfg`` on ``tp`` GPUs for ``batch`` sequences.

    Parameters (each one an assumption, recorded in ``DecodeStep.assumptions``):

    * ``n_params``: parameter count read per step; ``None`` uses the count computed from the
      config (LLaMA-2 70B: 68.98e9); the seed's "70B in fp16 is 140 GB" is ``n_params=70e9``.
    * ``memory_bandwidth``: HBM bytes/s; default the GPU preset's (H100 SXM 3.35e12).
    * ``link_bandwidth``: bytes/s per direction; default the link preset's. ``bidirectional=True``
      uses the datasheet's two-way total instead (NVLink 4: 900e9), which double-counts.
    * ``latency``: alpha, seconds per ring step (default 0; the link preset's is ``link.latency``).
    * ``ring``: multiply the payload by the ring factor ``2(t-1)/t`` (``False``: payload only).
    * ``allreduces_per_layer``: 2 (attention and MLP).
    * ``compute_model``: "memory" (time = bytes / bandwidth, the seed's model) or "roofline"
      (``max(bytes / B_mem, 2 N batch / (t F_peak mfu))``).
    * ``context_len``: tokens already in each sequence's KV cache, read once per step (0: ignore).
    * ``replicate_kv``: when ``tp > n_kv_heads`` each rank reads a whole KV head's cache.
    * ``algorithm``: the all-reduce algorithm of :mod:`tpp.costs.algorithms` ("ring", "tree",
      "nvls", "one_shot", "two_shot"): its bytes per GPU and its steps (each paying ``latency``).
    """
    m = resolve_model(model_cfg)
    ln = resolve_link(interconnect)
    g = resolve_gpu(accelerator)
    check_positive_ints(tp=tp, batch=batch, allreduces_per_layer=allreduces_per_layer)
    if isinstance(context_len, bool) or not isinstance(context_len, int) or context_len < 0:
        raise ValueError(f"context_len={context_len!r} must be an int >= 0 tokens")
    if compute_model not in COMPUTE_MODELS:
        raise ValueError(f"compute_model={compute_model!r}: use 'memory' or 'roofline'")
    if not 0 < mfu <= 1:
        raise ValueError(f"mfu={mfu} must be in (0, 1]")
    if latency < 0:
        raise ValueError(f"latency={latency} must be >= 0 seconds")
    # the GQA divisibility rules live in one place: tpp.tensor_parallel.attention
    kv_heads_r = attention_split(m.n_heads, m.n_kv_heads, tp, replicate_kv).kv_heads_per_rank

    e = Fraction(bytes_per_element(dtype))
    n = m.params if n_params is None else n_params
    if not n > 0:
        raise ValueError(f"n_params={n_params!r} must be > 0")
    b_mem = g.memory_bandwidth if memory_bandwidth is None else memory_bandwidth
    b_link = (ln.bidirectional if bidirectional else ln.bandwidth) if link_bandwidth is None \
        else link_bandwidth
    if not b_mem > 0 or not b_link > 0:
        raise ValueError("memory_bandwidth and link_bandwidth must be > 0 bytes/s")

    weight_bytes = Fraction(n) * e / tp
    kv_bytes = e * batch * context_len * 2 * m.n_layers * kv_heads_r * m.d_head
    memory_time = float((weight_bytes + kv_bytes) / Fraction(b_mem))
    compute_time = float(2 * Fraction(n) * batch / tp / Fraction(g.peak_flops_bf16 * mfu))

    payload = int(e * batch * m.d_model)
    n_ar = allreduces_per_layer * m.n_layers if tp > 1 else 0
    cost = all_reduce_cost(payload, tp, algorithm)
    sent_one = cost.bytes_sent_per_rank if ring else Fraction(payload)
    if not ring and algorithm != "ring":
        raise ValueError("ring=False (payload only, the seed's count) describes no algorithm: "
                         "pass algorithm='ring' with it, or ring=True")
    sent = n_ar * sent_one
    bw_time = float(sent / Fraction(b_link))
    lat_time = n_ar * cost.steps * latency

    assumptions = dict(
        model=m.name, n_params=float(n), dtype=dtype, gpu=g.name, memory_bandwidth=float(b_mem),
        link=ln.name, link_bandwidth=float(b_link), bidirectional=bidirectional, latency=latency,
        ring=ring, allreduces_per_layer=allreduces_per_layer, compute_model=compute_model,
        mfu=mfu, peak_flops=g.peak_flops_bf16, context_len=context_len, algorithm=algorithm,
    )
    return DecodeStep(
        tp=tp, batch=batch,
        weight_bytes_per_gpu=int(-(-weight_bytes.numerator // weight_bytes.denominator)),
        kv_bytes_per_gpu=int(kv_bytes), memory_time=memory_time, compute_time=compute_time,
        compute_bound=compute_time > memory_time, allreduce_payload_bytes=payload,
        allreduces_per_step=n_ar, allreduce_payload_per_step=n_ar * payload,
        allreduce_sent_per_gpu=int(sent), allreduce_bandwidth_time=bw_time,
        allreduce_latency_time=lat_time, gpu_memory_bytes=g.memory, assumptions=assumptions,
    )


def scaling_curve(
    model_cfg: ModelConfig | str, batch: int, interconnect: Link | str = "nvlink4",
    accelerator: GPU | str = "h100_sxm", degrees: tuple[int, ...] = (1, 2, 4, 8), **kwargs,
) -> dict[int, DecodeStep]:
    """:func:`decode_step` for each TP degree in ``degrees`` (same assumptions)."""
    return {t: decode_step(model_cfg, t, batch, interconnect, accelerator, **kwargs)
            for t in degrees}


def best_tp_degree(curve: dict[int, DecodeStep]) -> int:
    """The degree with the shortest step time (the smallest degree on ties)."""
    if not curve:
        raise ValueError("curve is empty: pass scaling_curve(...) output")
    return min(sorted(curve), key=lambda t: curve[t].step_time)


def crossover_bandwidth(
    model_cfg: ModelConfig | str, tp_low: int, tp_high: int, batch: int,
    accelerator: GPU | str = "h100_sxm", **kwargs,
) -> float:
    """Link bandwidth (bytes/s per direction) at which TP ``tp_high`` and ``tp_low`` take the same
    step time; below it ``tp_low`` is faster. Closed form: the step time is
    ``W_t + c_t / B_link`` (work + latency, plus bytes sent over bandwidth), so
    ``B* = (c_high - c_low) / (W_low - W_high)``. Returns ``inf`` if ``tp_high`` never wins.
    """
    if not tp_high > tp_low:
        raise ValueError(f"tp_high={tp_high} must be > tp_low={tp_low}")
    kwargs = dict(kwargs)
    kwargs.pop("link_bandwidth", None)
    lo = decode_step(model_cfg, tp_low, batch, "nvlink4", accelerator, link_bandwidth=1.0,
                     **kwargs)
    hi = decode_step(model_cfg, tp_high, batch, "nvlink4", accelerator, link_bandwidth=1.0,
                     **kwargs)
    w_lo = lo.work_time + lo.allreduce_latency_time
    w_hi = hi.work_time + hi.allreduce_latency_time
    c_lo, c_hi = lo.allreduce_sent_per_gpu, hi.allreduce_sent_per_gpu
    if w_lo <= w_hi:
        return float("inf")
    return (c_hi - c_lo) / (w_lo - w_hi)
