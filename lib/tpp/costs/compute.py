"""Time of a transformer layer's compute on one GPU, from the shapes of its kernels.

A roofline per kernel instead of one flat MFU:

* **GEMMs** (:func:`gemm_time`): ``2 m n k`` FLOPs at the GPU's *achievable* matmul rate
  (:attr:`tpp.hardware.GPU.matmul_flops_bf16`, a measured microbenchmark, not the datasheet
  peak), padded to whole waves of output tiles over the SMs (tile and wave quantization,
  NVIDIA Deep Learning Performance Guide, "Matrix Multiplication Background": small or skinny
  GEMMs leave SMs idle), and never faster than moving their operands through HBM
  (``2 (mk + kn + mn)`` bytes at the achievable bandwidth); plus a fixed launch cost.
* **attention**: fused/flash kernels (Dao 2023; Shah et al. 2024) run the causal half of
  ``4 b s^2 h / t`` FLOPs forward and 2.5 times that backward, at a kernel efficiency read off
  those papers' benchmarks (:data:`FLASH_EFFICIENCY`); eager attention (Megatron-LM 2021) is two
  batched GEMMs on the full ``s x s`` scores plus a softmax and dropout timed from their bytes.
* **element-wise work** (norms, activations, bias/dropout/residual, RoPE) from the bytes each
  fused kernel reads and writes (:func:`elementwise_bytes`), at the achievable HBM bandwidth;
  its backward moves about twice the forward's bytes.
* **optimizer step** (:func:`optimizer_step_time`): Adam reads and writes its states.

FLOPs per matmul are those of :mod:`tpp.costs.flops`; nothing here is fitted to end-to-end runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tpp.hardware import GPU
from tpp.models import ModelConfig

__all__ = ["ATTENTION", "FLASH_EFFICIENCY", "KERNEL_LAUNCH", "TILES", "LayerTime",
           "flash_efficiency", "gemm_time", "elementwise_bytes", "layer_gemms", "layer_time",
           "head_time", "optimizer_step_time"]

ATTENTION = ("flash2", "flash3", "eager")
#: output tiles (rows x columns) cuBLAS/CUTLASS choose from for large bf16 GEMMs (NVIDIA
#: "Matrix Multiplication Background" user's guide uses 256x128 and 128x128); the best is taken
TILES = ((256, 128), (128, 256), (128, 128))
#: seconds per kernel launch and ramp (assumption: order of a CUDA launch, 2-5 us)
KERNEL_LAUNCH = 3e-6
#: share of the dense bf16 peak a flash-attention kernel reaches, causal, head dim 128,
#: sequences of 2k-16k, (forward, backward), read off the kernels' published benchmarks:
#: FlashAttention-2 on A100 (Dao 2023, Figs. 4-6: 50-73 % forward, ~55 % backward);
#: FlashAttention-2 on H100 (Shah et al. 2024, FlashAttention-3 paper, Figs. 5-6: "only 35 %
#: utilization" forward, ~30 % backward); FlashAttention-3 on H100 (same figures: ~600-660
#: TFLOP/s forward, ~450-550 backward, of 989). FA3 needs Hopper.
FLASH_EFFICIENCY = {("flash2", "A100"): (0.65, 0.55), ("flash2", "H100"): (0.35, 0.30),
                    ("flash2", "H200"): (0.35, 0.30), ("flash3", "H100"): (0.62, 0.48),
                    ("flash3", "H200"): (0.62, 0.48)}


def _pos(name: str, v: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}={v!r} must be a positive int")


def gemm_time(m: int, n: int, k: int, gpu: GPU, batch: int = 1, bytes_per: int = 2) -> float:
    """Seconds of ``batch`` GEMMs ``[m, k] x [k, n]`` on ``gpu`` (roofline + wave quantization).

    ``max(padded FLOPs / achievable matmul rate, operand bytes / achievable HBM bandwidth)``
    plus :data:`KERNEL_LAUNCH`; padded FLOPs count whole waves of output tiles over the SMs.
    """
    for name, v in (("m", m), ("n", n), ("k", k), ("batch", batch)):
        _pos(name, v)
    if not gpu.matmul_flops_bf16 > 0:
        raise ValueError(f"{gpu.name} has no achievable matmul rate (matmul_flops_bf16): add "
                         "a measured value to its tpp.hardware preset")
    best = math.inf
    for tm, tn in TILES:
        tiles = batch * -(-m // tm) * -(-n // tn)
        waves = -(-tiles // gpu.sms)
        best = min(best, waves * gpu.sms * tm * tn)
    flops = 2 * best * k
    moved = bytes_per * batch * (m * k + k * n + m * n)
    return max(flops / gpu.matmul_flops_bf16,
               moved / gpu.achievable_memory_bandwidth) + KERNEL_LAUNCH


def layer_gemms(model: ModelConfig, tokens: int, t: int) -> list[tuple[int, int, int]]:
    """The weight GEMMs ``(m, n, k)`` of one layer's forward on one TP rank: QKV (column
    parallel), O (row parallel), the MLP's up (and gate) and down projections."""
    from tpp.costs.memory import kv_heads_per_rank

    d, dh = model.d_model, model.d_head
    q = model.n_heads // t
    kv = kv_heads_per_rank(model.n_kv_heads, t, model.n_heads)
    ff = model.d_ff // t
    up = 2 * ff if model.mlp == "swiglu" else ff
    return [(tokens, (q + 2 * kv) * dh, d), (tokens, d, q * dh), (tokens, up, d),
            (tokens, d, ff)]


def elementwise_bytes(model: ModelConfig, b: int, s: int, t: int, sp: bool,
                      attention: str) -> float:
    """HBM bytes of one layer's forward element-wise kernels on one TP rank.

    Per element of a ``b x s x h`` tensor (2-byte activations, 1-byte dropout masks), with
    the kernels Megatron-LM fuses: each norm reads and writes (4 B); each residual add reads two
    tensors and writes one (6 B), with dropout its mask too (7 B: GPT-style models; Llama
    models have no dropout); the MLP activation reads its input(s) and writes its output
    (GELU 4 B, SwiGLU 6 B per ``d_ff`` element); RoPE (rotary models, here: no learned
    positions) reads and writes Q and K. Under sequence parallelism the norm and residual
    regions hold ``s / t`` tokens, else all ``s`` on every TP rank. Eager attention adds the
    scores' softmax (4 B) and dropout (5 B) per element of ``b (a/t) s^2``.
    """
    h, dh = model.d_model, model.d_head
    rows = b * (s // t if sp else s)
    dropout = model.learned_positions > 0  # GPT-style presets train with dropout
    out = rows * h * (2 * 4 + 2 * (7 if dropout else 6))
    out += b * s * (model.d_ff // t) * (6 if model.mlp == "swiglu" else 4)
    if not model.learned_positions:  # rotary embeddings on Q and K
        out += 4 * b * s * (model.n_heads + model.n_kv_heads) // t * dh
    if attention == "eager":
        out += 9 * b * (model.n_heads // t) * s * s
    return out


@dataclass(frozen=True)
class LayerTime:
    """Seconds of one layer's forward and backward on one rank, by kind of kernel."""

    gemm_f: float
    attention_f: float
    elementwise_f: float
    gemm_b: float
    attention_b: float
    elementwise_b: float

    @property
    def forward(self) -> float:
        return self.gemm_f + self.attention_f + self.elementwise_f

    @property
    def backward(self) -> float:
        return self.gemm_b + self.attention_b + self.elementwise_b


def flash_efficiency(kernel: str, gpu: GPU) -> tuple[float, float]:
    """(forward, backward) share of peak of flash kernel ``kernel`` on ``gpu``."""
    for (k, fam), eff in FLASH_EFFICIENCY.items():
        if k == kernel and fam in gpu.name:
            return eff
    raise ValueError(f"no {kernel} efficiency for {gpu.name} in "
                     "tpp.costs.compute.FLASH_EFFICIENCY: use attention='flash2' or 'eager'")


def layer_time(model: ModelConfig, b: int, s: int, t: int, gpu: GPU, *, sp: bool = True,
               attention: str = "flash2", cp: int = 1) -> LayerTime:
    """Forward and backward seconds of one layer for ``b`` sequences of ``s`` tokens, on one
    rank of a TP group of ``t`` (and a CP group of ``cp``: ``s / cp`` query tokens per rank,
    attending to all ``s``). Backward GEMMs: the input gradient ``(m, k, n)`` and the weight
    gradient ``(k, n, m)`` of each forward ``(m, n, k)``."""
    for name, v in (("b", b), ("s", s), ("t", t), ("cp", cp)):
        _pos(name, v)
    if attention not in ATTENTION:
        raise ValueError(f"attention={attention!r}: use one of {', '.join(ATTENTION)}")
    if s % cp:
        raise ValueError(f"CP={cp} must divide s={s}")
    sq = s // cp
    bw = gpu.achievable_memory_bandwidth
    gf = gb = 0.0
    for m, n, k in layer_gemms(model, b * sq, t):
        gf += gemm_time(m, n, k, gpu)
        gb += gemm_time(m, k, n, gpu) + gemm_time(k, n, m, gpu)
    heads, dh = model.n_heads // t, model.d_head
    if attention != "eager":
        ef, eb = flash_efficiency(attention, gpu)
        fl = 0.5 * 4 * b * sq * s * heads * dh  # the causal half of QK^T and PV
        af = fl / (ef * gpu.peak_flops_bf16) + KERNEL_LAUNCH
        ab = 2.5 * fl / (eb * gpu.peak_flops_bf16) + KERNEL_LAUNCH
    else:  # full s x s scores, as Megatron-LM 2021 computes them (batched GEMMs)
        n_b = b * heads
        af = gemm_time(sq, s, dh, gpu, n_b) + gemm_time(sq, dh, s, gpu, n_b)
        ab = (gemm_time(sq, dh, s, gpu, n_b) + gemm_time(dh, s, sq, gpu, n_b)
              + gemm_time(sq, s, dh, gpu, n_b) + gemm_time(s, dh, sq, gpu, n_b))
    ew = elementwise_bytes(model, b, sq, t, sp, attention) / bw
    n_kernels = 10  # norms, residuals, activation, rope/softmax...: launch costs
    return LayerTime(gf, af, ew + n_kernels * KERNEL_LAUNCH, gb, ab,
                     2 * ew + 2 * n_kernels * KERNEL_LAUNCH)


def head_time(model: ModelConfig, b: int, s: int, t: int, gpu: GPU) -> tuple[float, float]:
    """(forward, backward) seconds of the vocabulary-parallel LM head and its cross-entropy
    on one TP rank: the logits GEMM ``[bs, h] x [h, V/t]`` and fp32 logits read and written
    by the fused softmax cross-entropy."""
    v = -(-model.vocab_size // t)
    f = gemm_time(b * s, v, model.d_model, gpu)
    bwd = gemm_time(b * s, model.d_model, v, gpu) + gemm_time(model.d_model, v, b * s, gpu)
    ce = 2 * 4 * b * s * v / gpu.achievable_memory_bandwidth
    return f + ce, bwd + ce


def optimizer_step_time(n_params: int, gpu: GPU, bytes_per_param: int = 30) -> float:
    """Seconds of an Adam step over ``n_params`` (the rank's shard), memory-bound: fp32
    master weight, momentum and variance read and written (24 B), the fp32 gradient read
    (4 B) and the bf16 weight written (2 B): 30 bytes per parameter (Megatron-LM's
    distributed optimizer keeps these states)."""
    if n_params < 0:
        raise ValueError(f"n_params={n_params} must be >= 0")
    return bytes_per_param * n_params / gpu.achievable_memory_bandwidth
