"""The field's memory and FLOPs calculators, re-implemented formula for formula.

Each function transcribes one published calculator as its source code computes it (not as its
documentation describes it), so that the errata page (``chapters/appendix_errata.ipynb``) can
compare it with the course's own derivations (:mod:`tpp.costs.memory`, :mod:`tpp.costs.flops`,
:mod:`tpp.costs.zero`, :mod:`tpp.pipeline`). Names follow the sources' variables; every docstring
names the repository, file and commit read. Only the dense-transformer paths are transcribed
(no MoE, MLA, MTP or hybrid branches). They live in :mod:`tpp.costs` because they are cost
models too — the field's, set beside the course's own, one module for all of them.

Sources (read on 2026-12-01):

* Ultra-Scale Playbook memory widget: ``vinjn/nanotron-ultrascale-playbook`` (a GitHub copy of
  the Hugging Face Space ``nanotron/ultrascale-playbook``), ``main.bundle.js`` at ``e3bcfc5``,
  functions ``activationMemory`` and ``paramGradsOpt``.
* Megatron-LM ``megatron/training/theoretical_memory_usage.py`` at ``1bcb3b9`` (repository
  snapshot ``d98e8a6``); ``megatron/training/training.py`` ``num_floating_point_operations`` at
  ``da5a81d`` (causal halving since ``8873b55``, 2025-03-06; the formula before it at
  ``8873b55^``).
* DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py`` ``estimate_zero2_model_states_mem_needs``
  at ``edaa722`` (formula changed in ``f4cb866``, PR #5099, 2024-06-04);
  ``docs/code-docs/source/memory.rst`` at ``858e91e``.
* EleutherAI cookbook ``calc/calc_transformer_flops.py`` at ``fce1d1c``.
"""

from __future__ import annotations

import math

__all__ = [
    "playbook_activation_bytes",
    "playbook_param_grad_opt_bytes",
    "playbook_params",
    "megatron_weight_optimizer_bytes",
    "megatron_activation_bytes_sp",
    "megatron_activation_bytes_no_sp",
    "megatron_interleaved_penalty",
    "megatron_in_flight_microbatches",
    "megatron_flops",
    "deepspeed_zero2_gpu_bytes",
    "deepspeed_zero2_gpu_bytes_before_5099",
    "cookbook_flops",
]


def _pos(**kw: float) -> None:
    for name, v in kw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"{name}={v!r} must be a positive number")


# ---------------------------------------------------------------- Ultra-Scale Playbook widget
def playbook_activation_bytes(
    a: int, b: int, h: int, h_ff: int, L: int, s: int, v: int, tp: int = 1, mixed: bool = True,
    recomputation: str = "none", ff_activation: str = "relu", seq_parallel: bool = False,
) -> dict[str, float]:
    """The Playbook widget's ``activationMemory`` (bytes), by the names of its treemap.

    Source: vinjn/nanotron-ultrascale-playbook, ``main.bundle.js`` at e3bcfc5, function
    ``activationMemory(a, b, h, h_ff, L, s, v, tp, mixed, recomputation, ff_activation,
    seq_parallel)``. Per layer (keys ``attention``, ``feedforward``, ``layernorm``, summed in
    ``layer``) for recomputation "none"/"selective"; with "full", ``layer`` is the stored layer
    input ``s b h bytes``. ``total`` adds the L layers and the input dropout, final LayerNorm,
    projection and fp32 cross-entropy terms, as the widget does.
    """
    _pos(a=a, b=b, h=h, h_ff=h_ff, L=L, s=s, v=v, tp=tp)
    if recomputation not in ("none", "selective", "full"):
        raise ValueError(f"recomputation={recomputation!r}: use 'none', 'selective' or 'full'")
    if ff_activation not in ("relu", "gelu", "swiglu"):
        raise ValueError(f"ff_activation={ff_activation!r}: use 'relu', 'gelu' or 'swiglu'")
    e = 2 if mixed else 4  # bytesPerValue
    sbh = s * b * h
    if recomputation in ("none", "full"):
        if seq_parallel:  # the a s^2 b term is NOT divided by tp in this branch
            attention = sbh / tp * (e * 5 + 1) + (2 * e + 1) * a * s * s * b
        else:
            attention = sbh * (e * 4 / tp + e + 1) + (2 * e + 1) * a * s * s * b / tp
    else:
        attention = sbh / tp * (e * 5 + 1) if seq_parallel else sbh * (e * 4 / tp + e + 1)
    sp = tp if seq_parallel else 1
    ff = sbh * e / sp + s * b * h_ff * e / tp + sbh / sp  # linear inputs + dropout mask
    if ff_activation == "gelu":
        ff += s * b * h_ff * e / tp
    elif ff_activation == "swiglu":
        ff += s * b * h_ff * e * 3 / tp  # "inputs of activation function"
    layernorm = sbh * e / sp
    other = sbh / sp + 2 * sbh * e / sp + s * b * v * 4 / sp  # dropout, LN, projection, CE
    if recomputation == "full":
        layer = sbh * e  # "LayerInput": never divided by tp, with or without SP
        return {"layer": layer, "total": layer * L + other}
    layer = attention + ff + 2 * layernorm
    return {"attention": attention, "feedforward": ff, "layernorm": 2 * layernorm,
            "layer": layer, "total": layer * L + other}


def playbook_params(h: int, L: int, s: int, v: int) -> int:
    """The widget's parameter count: ``h (v + s) + L (12 h^2 + 13 h) + 2 h`` (GPT-2 layout).

    Source: ``paramGradsOpt`` in main.bundle.js at e3bcfc5 (``emb = h * (v + s)``,
    ``oneLayer = 12 * h^2 + 13 * h``, ``other = 2 * h``). It takes neither ``h_ff``, nor the
    number of KV heads, nor the MLP type.
    """
    _pos(h=h, L=L, s=s, v=v)
    return h * (v + s) + L * (12 * h * h + 13 * h) + 2 * h


def playbook_param_grad_opt_bytes(
    h: int, L: int, s: int, v: int, k: int = 8, dp: int = 1, zero: int = 0, mixed: bool = True,
) -> dict[str, float]:
    """The widget's ``paramGradsOpt``: bytes of parameters, gradients and optimizer states.

    Source: main.bundle.js at e3bcfc5. ``k = 8`` (+4 with mixed precision for the fp32 master
    copy); parameters and gradients at 2 bytes (mixed) or 4; ZeRO ``zero`` divides by ``dp``.
    The function takes no TP or PP degree: these bytes are never divided by them.
    """
    _pos(k=k, dp=dp)
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"zero={zero!r}: use 0, 1, 2 or 3")
    n = playbook_params(h, L, s, v)
    kk = k + 4 if mixed else k
    e = 2 if mixed else 4
    return {"parameters": e * n / dp if zero >= 3 else e * n,
            "gradients": e * n / dp if zero >= 2 else e * n,
            "optimizer": kk * n / dp if zero >= 1 else kk * n}


# ---------------------------------------------------------------- Megatron-LM
def megatron_weight_optimizer_bytes(
    hidden_size: int, num_layers: int, num_attention_heads: int, num_query_groups: int,
    ffn_hidden_size: int, padded_vocab_size: int, tp: int = 1, pp: int = 1, dp: int = 1,
    kv_channels: int | None = None, swiglu: bool = True, rmsnorm: bool = True,
    untie_embeddings: bool = True, distributed_optimizer: bool = False,
) -> float:
    """``compute_weight_and_optimizer_memory`` (dense path), bytes on the most loaded rank.

    Source: NVIDIA/Megatron-LM ``megatron/training/theoretical_memory_usage.py`` at 1bcb3b9.
    Attention ``2 h^2 (1 + g/a) (q/h)``, MLP ``2 h f`` (x 3/2 with SwiGLU), norms ``2 h``
    (RMSNorm) per layer; the TP-sharded part (layers and one embedding) is divided by ``tp``
    -- also K and V when ``tp > g`` -- and ``18`` bytes per parameter (``6 + 12/dp`` with the
    distributed optimizer).
    """
    _pos(hidden_size=hidden_size, num_layers=num_layers, tp=tp, pp=pp, dp=dp)
    h = hidden_size
    q = (kv_channels or h // num_attention_heads) * num_attention_heads
    norm = 1 if rmsnorm else 2
    attn = 2 * h * h * ((1 + num_query_groups / num_attention_heads) * q / h)
    mlp = 2 * h * ffn_hidden_size * (3 / 2 if swiglu else 1)
    emb = h * padded_vocab_size
    tp_sharded = (attn + mlp) * num_layers
    replicated = 2 * h * norm * num_layers + norm * h  # two norms per layer + final norm
    shard = (tp_sharded / pp + emb) / tp
    if untie_embeddings and pp == 1:
        shard += emb / tp
    per_param = 6 + 12 / dp if distributed_optimizer else 18
    return (shard + replicated / pp) * per_param


def megatron_activation_bytes_sp(
    s: int, b: int, h: int, ffn_hidden_size: int, num_layers: int, tp: int = 1, pp: int = 1,
    vpp: int | None = None, num_microbatches: int | None = None, padded_vocab_size: int = 0,
) -> float:
    """``compute_activation_memory`` (used with SP and selective recompute), bytes on rank 0.

    Source: ``theoretical_memory_usage.py`` at 1bcb3b9: per layer ``s b h (18 + 4 f/h)``
    (Korthikanti's ``34 s b h`` when f = 4h) times L, plus ``8 s b pp`` + ``s b h pp``
    (embedding), times :func:`megatron_interleaved_penalty` with ``vpp`` (not capped by the
    number of microbatches) or ``min(1, M/pp)`` without it; ``+ 4 s b h (1 + V/h)`` at pp = 1;
    all divided by ``tp``. The source's ``num_layers`` is the whole model's.
    """
    _pos(s=s, b=b, h=h, ffn_hidden_size=ffn_hidden_size, num_layers=num_layers, tp=tp, pp=pp)
    mem = s * b * h * (18 + 4 * ffn_hidden_size / h) * num_layers
    mem = _embedding_and_pipeline(mem, s, b, h, pp, vpp, num_microbatches)
    if pp == 1:
        mem += s * b * h * 4 * (1 + padded_vocab_size / h)
    return mem / tp



def _embedding_and_pipeline(mem: float, s: int, b: int, h: int, pp: int, vpp: int | None,
                            num_microbatches: int | None) -> float:
    """The part both of Megatron's activation functions share (``theoretical_memory_usage.py``
    at 1bcb3b9): the embedding terms ``8 s b pp + s b h pp`` added, then the in-flight factor,
    :func:`megatron_interleaved_penalty` with ``vpp`` or ``min(1, M/pp)`` without it."""
    mem += 8 * s * b * pp + s * b * h * pp
    if vpp is not None:
        return mem * megatron_interleaved_penalty(pp, vpp)
    if pp > 1 and num_microbatches is not None:
        return mem * min(1, num_microbatches / pp)
    return mem

def megatron_activation_bytes_no_sp(
    s: int, b: int, h: int, num_layers: int, tp: int = 1, pp: int = 1, vpp: int | None = None,
    num_microbatches: int | None = None, padded_vocab_size: int = 0,
) -> float:
    """``compute_activation_memory_without_sp`` (every other case), bytes on rank 0.

    Source: ``theoretical_memory_usage.py`` at 1bcb3b9: per layer ``s b h (10 + 24/tp)`` --
    Korthikanti's eq. (2) with selective recompute, whose 24 holds only for ``d_ff = 4h`` (the
    function takes no ``ffn_hidden_size``) -- times L, plus the embedding terms, the same
    pipeline factors as :func:`megatron_activation_bytes_sp`, logits at pp = 1, times 1.05.
    """
    _pos(s=s, b=b, h=h, num_layers=num_layers, tp=tp, pp=pp)
    mem = s * b * h * (10 + 24 / tp) * num_layers
    mem = _embedding_and_pipeline(mem, s, b, h, pp, vpp, num_microbatches)
    if pp == 1:
        mem += (s * b * padded_vocab_size / tp + s * b * h) * 2
    return mem * 1.05


def megatron_interleaved_penalty(pp: int, vpp: int) -> float:
    """Megatron's interleaved-schedule memory factor ``1 + (pp - 1) / (pp vpp)``.

    Source: ``theoretical_memory_usage.py`` at 1bcb3b9 (both activation functions); its
    in-flight count is ``ceil(penalty x pp)`` microbatches, whatever the number of microbatches.
    """
    _pos(pp=pp, vpp=vpp)
    return 1 + (pp - 1) / (pp * vpp)


def megatron_in_flight_microbatches(pp: int, vpp: int | None = None,
                                    num_microbatches: int | None = None) -> int:
    """The in-flight microbatches Megatron's estimate assumes on the first stage.

    Source: ``theoretical_memory_usage.py`` at 1bcb3b9: ``ceil(penalty x pp)`` with ``vpp``
    (``num_microbatches`` is ignored), ``min(M, pp)`` without it.
    """
    if vpp is not None:
        return math.ceil(megatron_interleaved_penalty(pp, vpp) * pp)
    return pp if num_microbatches is None else min(num_microbatches, pp)


def megatron_flops(
    batch_size: int, seq_length: int, num_layers: int, hidden_size: int,
    num_attention_heads: int, num_query_groups: int, ffn_hidden_size: int,
    padded_vocab_size: int, kv_channels: int | None = None, swiglu: bool = True,
    causal_halving: bool = True,
) -> float:
    """``num_floating_point_operations`` for a dense GQA model (forward + backward, one batch).

    Source: NVIDIA/Megatron-LM ``megatron/training/training.py`` at da5a81d
    (``transformer_flops``, BSHD): ``3 x 2 x`` [``h f (3 if swiglu else 2)`` +
    ``h (q + 2 kv) + q h`` + ``h V``] per token and layer (logits once), plus core attention
    ``3 x 2 x q / 2 x 2`` per layer and per ``b s^2``: the ``/ 2`` for the causal mask came in
    8873b55 (2025-03-06). ``causal_halving=False`` gives the formula before it (8873b55^),
    ``12 b s L h^2 (... + s/h ...)``, i.e. the full ``s x s`` score matrix.
    """
    _pos(batch_size=batch_size, seq_length=seq_length, num_layers=num_layers)
    h, s = hidden_size, seq_length
    q = (kv_channels or h // num_attention_heads) * num_attention_heads
    kv = (kv_channels or h // num_attention_heads) * num_query_groups
    per_token = 3 * 2 * (h * ffn_hidden_size * (3 if swiglu else 2) * num_layers
                         + (h * (q + 2 * kv) + q * h) * num_layers + h * padded_vocab_size)
    core = 3 * 2 * q / 2 * 2 * num_layers
    if not causal_halving:
        core *= 2
    return batch_size * s * per_token + batch_size * s * s * core


# ---------------------------------------------------------------- DeepSpeed
def deepspeed_zero2_gpu_bytes(total_params: int, total_gpus: int, cpu_offload: bool = False) -> int:
    """``estimate_zero2_model_states_mem_needs``: GPU bytes, ``2 Psi + int(18 Psi / N)``.

    Source: deepspeedai/DeepSpeed ``deepspeed/runtime/zero/stage_1_and_2.py`` at edaa722: 2 bytes
    of 16-bit parameters replicated; 18 = 2 (16-bit grads) + 4 (fp32 grads) + 4 (fp32 params)
    + 8 (Adam moments) per parameter, partitioned. With CPU offload only ``2 Psi`` stays.
    """
    _pos(total_params=total_params, total_gpus=total_gpus)
    if cpu_offload:
        return int(2 * total_params)
    return int(2 * total_params + int(18 * total_params / total_gpus))


def deepspeed_zero2_gpu_bytes_before_5099(total_params: int, total_gpus: int) -> int:
    """The same estimator before DeepSpeed PR #5099 (f4cb866, 2024-06-04): ``4 Psi + 16 Psi/N``.

    This is the formula behind the example output that ``docs/code-docs/source/memory.rst``
    (at 858e91e) still prints (15.93 GB per GPU for 2851M parameters on 8 GPUs).
    """
    _pos(total_params=total_params, total_gpus=total_gpus)
    return int(4 * total_params + int(16 * total_params / total_gpus))


# ---------------------------------------------------------------- EleutherAI cookbook
def cookbook_flops(
    num_layers: int, hidden_size: int, sequence_length: int, vocab_size: int, tokens: float,
    kv_size_ratio: float = 1.0, ffn_expansion_factor: float = 4, num_mlp_linears: int = 2,
    checkpoint_activations: bool = True, infer: bool = False,
) -> dict[str, float]:
    """``calc_flops`` of EleutherAI/cookbook ``calc/calc_transformer_flops.py`` at fce1d1c (dense).

    ``iter_factor`` = 3 (+1 with checkpointing; 1 for inference) multiplies QKV, the two
    attention matmuls (full ``s x s``), the output projection and the MLP, whose factor is
    ``int(iter_factor * 2 * num_mlp_linears * ffn_expansion_factor)``; the embedding term
    ``tokens (4 h + 2 h V)`` is not multiplied by ``iter_factor`` (the LM head's forward only).
    The script's ``--ffn-expansion-factor`` is ``type=int`` and its ``--ffn-hidden-size`` enters
    only an assert; pass a fractional ``ffn_expansion_factor`` to see what ``int()`` does.
    """
    _pos(num_layers=num_layers, hidden_size=hidden_size, sequence_length=sequence_length)
    it = 1 if infer else 3 + (1 if checkpoint_activations else 0)
    L, h, s, T = num_layers, hidden_size, sequence_length, tokens
    terms = {
        "qkv": int(it * 2 * (1 + 2 * kv_size_ratio) * L * T * h * h),
        "attention_matrix": it * 2 * L * T * s * h,
        "attention_over_values": it * 2 * L * T * s * h,
        "linear_projection": it * 2 * L * T * h * h,
        "ffn": int(it * 2 * num_mlp_linears * ffn_expansion_factor) * L * T * h * h,
        "embedding": T * (4 * h + 2 * h * vocab_size),
    }
    terms["total"] = sum(terms.values())
    return terms
