"""Parameter and activation memory of one transformer layer (Korthikanti et al. 2022).

Notation of the paper (Sec. 4): ``s`` sequence length, ``b`` microbatch size, ``h`` hidden size,
``a`` attention heads, ``t`` tensor-parallel degree. Activations are counted in the paper's
accounting: 2 bytes per activation element (16-bit), 1 byte per dropout-mask element.

Closed forms per layer (bytes), Korthikanti et al. 2022, eqs. (1)-(3) and Table 2:

* no parallelism            ``s b h (34 + 5 a s / h)``                    eq. (1)
* tensor parallel           ``s b h (10 + 24 / t + 5 a s / (h t))``       eq. (2)
* tensor + sequence par.    ``s b h / t (34 + 5 a s / h)``                eq. (3)
* selective recomputation   drops the ``5 a s / h`` term (softmax, its dropout mask and output)
* full recomputation        ``2 s b h`` (only the layer input; ``/ t`` under SP)     Table 2

:func:`activation_bytes_per_layer` generalises these to any ``d_ff`` and to GQA (``n_kv_heads``,
with KV replication when ``t > n_kv_heads``), and to the training recipe: ``attention``
("eager": the softmax materialised, the paper's ``5as/h``; "flash": only a log-sum-exp per row),
``mlp`` ("gelu": two ``d_ff``-wide tensors; "swiglu": three) and ``dropout`` (masks or none);
with ``d_ff = 4h``, ``n_kv_heads = a`` and the default recipe it equals the paper's forms
exactly. :func:`model_activation_terms` takes the recipe from a :mod:`tpp.models` preset.
``tpp.tensor_parallel.block`` (the GELU layer) and ``tpp.tensor_parallel.llama_block`` (every
recipe) count the tensors their simulated layers keep for backward, and the tests assert the
counts equal these functions. :func:`runtime_reserve_terms` states what a process holds beyond
its tensors.

Conventions against Megatron-LM's ``megatron/training/theoretical_memory_usage.py`` (commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553), term by term:

* per-layer activations: Megatron ``sbh (18 + 4 d_ff/h) / t`` (SP + selective) and
  ``sbh (10 + 24/t)`` (otherwise, i.e. no ``5as/h`` whatever the attention): a GELU MLP, MHA
  and dropout masks always; ours follows the recipe (SwiGLU, GQA, flash, no dropout);
* in-flight microbatches: Megatron multiplies by ``P`` (1F1B, or ``min(M, P)``) and by the
  interleaving penalty ``1 + (P-1)/(P v)``; the planner reads the peak from the simulated
  schedule, each set weighed by its own chunk (``tpp.pipeline.memory``);
* embedding and output: Megatron adds ``8sbP`` (token ids) + ``sbhP`` (embedding dropout) on the
  first stage and, with ``P = 1``, ``4sbh(1 + V/h)`` of output-layer input and fp32 logits; the
  planner counts the fp32 logits ``4sbV/t`` on the last stage only;
* overhead: Megatron multiplies the activations by 1.05, "buffer for optimizer and
  miscellaneous temporaries (5% overhead)", in ``compute_activation_memory_without_sp`` only
  (the branch it takes unless SP and selective recomputation are both on; its SP + selective
  branch adds nothing); ours is the explicit :func:`runtime_reserve_terms` (CUDA context and
  NCCL buffers, each from a cited source; no allowance for temporaries or fragmentation unless
  asked for: ``fragmentation=MEGATRON_OVERHEAD`` adds that 5 %).
"""

from __future__ import annotations

import math
from fractions import Fraction

from tpp.hardware import bytes_per_element
from tpp.models import ModelConfig
from tpp.tensor_parallel.attention import attention_split

__all__ = [
    "SCHEMES",
    "RECOMPUTE",
    "ATTENTION",
    "MLP_KINDS",
    "model_activation_terms",
    "runtime_reserve_terms",
    "FRAGMENTATION",
    "MEGATRON_OVERHEAD",
    "runtime_reserve_bytes",
    "korthikanti_activation_bytes",
    "activation_bytes_per_layer",
    "activation_terms_per_layer",
    "kv_heads_per_rank",
    "layer_params_per_rank",
    "layer_weight_bytes_per_rank",
]

SCHEMES = ("none", "tp", "tp_sp")
RECOMPUTE = ("none", "selective", "full")
#: Attention implementations: fused (FlashAttention) or eager (the softmax materialised).
ATTENTION = ("flash", "eager")
MLP_KINDS = ("gelu", "swiglu")


def _check_pos(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")


def _check_scheme(scheme: str, recompute: str, t: int) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme={scheme!r}: use one of {', '.join(SCHEMES)}")
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r}: use one of {', '.join(RECOMPUTE)}")
    if scheme == "none" and t != 1:
        raise ValueError(f"scheme='none' means no tensor parallelism: pass t=1 (got t={t}) "
                         "or use scheme='tp' / 'tp_sp'")


def korthikanti_activation_bytes(
    s: int, b: int, h: int, a: int, t: int = 1, scheme: str = "none", recompute: str = "none"
) -> Fraction:
    """Activation bytes per layer, exactly as printed in Korthikanti et al. 2022 (Table 2).

    ``scheme``: "none" (eq. 1, t must be 1), "tp" (eq. 2), "tp_sp" (eq. 3).
    ``recompute``: "none"; "selective" (drop ``5as/h``); "full" (``2sbh``, ``2sbh/t`` with SP).
    Assumes d_ff = 4h, MHA, 2-byte activations and 1-byte dropout masks.
    """
    for name, v in (("s", s), ("b", b), ("h", h), ("a", a), ("t", t)):
        _check_pos(name, v)
    _check_scheme(scheme, recompute, t)
    sbh = Fraction(s * b * h)
    attn = Fraction(5 * a * s, h) if recompute == "none" else Fraction(0)
    if recompute == "full":
        return 2 * sbh / (t if scheme == "tp_sp" else 1)
    if scheme == "none":
        return sbh * (34 + attn)
    if scheme == "tp":
        return sbh * (10 + Fraction(24, t) + attn / t)
    return sbh / t * (34 + attn)


def kv_heads_per_rank(n_kv_heads: int, t: int, n_heads: int | None = None) -> int:
    """KV heads held by one rank: n_kv / t, or 1 when KV heads are replicated (t > n_kv).

    The rule lives in :func:`tpp.tensor_parallel.attention.attention_split` (with
    ``replicate_kv=True``); this function only asks it. ``n_heads`` (query heads) also checks
    that ``t`` divides them; without it the fewest query heads any valid model could have,
    ``lcm(n_kv_heads, t)``, is assumed, so only the KV-head rules apply.
    """
    _check_pos("n_kv_heads", n_kv_heads)
    _check_pos("t", t)
    q_heads = math.lcm(n_kv_heads, t) if n_heads is None else n_heads
    return attention_split(q_heads, n_kv_heads, t, replicate_kv=True).kv_heads_per_rank


def _check_recipe(attention: str, mlp: str, dropout: bool) -> None:
    if attention not in ATTENTION:
        raise ValueError(f"attention={attention!r}: use 'flash' (fused kernel, no s x s scores "
                         "kept) or 'eager' (the softmax and its dropout are stored)")
    if mlp not in MLP_KINDS:
        raise ValueError(f"mlp={mlp!r}: use 'gelu' (two d_ff-wide tensors) or 'swiglu' (three)")
    if not isinstance(dropout, bool):
        raise ValueError(f"dropout={dropout!r} must be True or False (False: the recipe has no "
                         "dropout, e.g. Llama)")


def activation_terms_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none",
    d_ff: int | None = None, n_kv_heads: int | None = None, act_bytes: int = 2,
    mask_bytes: int = 1, *, attention: str = "eager", mlp: str = "gelu", dropout: bool = True,
    lse_bytes: int = 4,
) -> dict[str, int]:
    """The tensors one rank keeps for backward in one layer, by name, in bytes (ints).

    The generalisation of Korthikanti et al. 2022 Sec. 4.1 (attention 11sbh + 5as^2b, MLP
    19sbh, two LayerNorms 4sbh) to any ``d_ff`` and ``n_kv_heads``. Names match the keys the
    simulated blocks (``tpp.tensor_parallel.block`` for the GELU layer,
    ``tpp.tensor_parallel.llama_block`` for every recipe) record.

    The recipe (defaults: the paper's layer, so old calls are unchanged):

    * ``attention="eager"``: the softmax output ``2as^2b/t``, and with ``dropout`` its mask
      ``as^2b/t`` and output ``2as^2b/t`` (Korthikanti's ``5as^2b``; dropped by selective
      recomputation). ``"flash"`` (FlashAttention, Dao et al. 2022, Alg. 2 and Sec. 3.1):
      no ``s x s`` tensor; the backward recomputes the scores from Q, K and the row-wise
      log-sum-exp, kept in fp32 (``lse_bytes = 4``): ``softmax_lse = 4 b (a/t) s`` bytes.
      Flash's attention dropout regenerates its mask from the RNG state: nothing stored.
    * ``mlp="gelu"``: ``gelu_input`` and ``fc2_input`` (two ``s b d_ff/t`` tensors).
      ``"swiglu"`` (Shazeer 2020): the gate and up pre-activations ``x W1``, ``x W3`` and
      their product ``silu(x W1) * x W3`` (the input of W2): three ``s b d_ff/t`` tensors.
    * ``dropout``: the two ``sbh`` 1-byte masks after attention and MLP (Llama has none).
    * ``sp``: the LayerNorm/dropout regions hold ``s/t`` rows (Korthikanti Sec. 4.2.2).
    * ``recompute="full"``: only the layer input, whatever the recipe.

    Conventions against Megatron-LM's ``megatron/training/theoretical_memory_usage.py``
    (commit d98e8a64ddf34856e74b24714e3bedb2f5a39553, ``compute_activation_memory``): it uses
    ``sbh (18 + 4 d_ff/h) / t`` per layer for SP with selective recompute, i.e. our GELU,
    MHA, dropout, no-``s^2`` layer; it counts neither SwiGLU's third ``d_ff`` tensor (it
    ignores ``--swiglu`` here, though its parameter count uses it), nor GQA's smaller K and V
    (a TODO in that file), nor flash's log-sum-exp, and it keeps the dropout masks whatever
    the dropout rate. Without SP it uses ``sbh (10 + 24/t)`` (eq. 2 without ``5as/h``) and
    multiplies the activations by 1.05 for "optimizer and miscellaneous temporaries"; our
    reserve for that is :func:`runtime_reserve_terms`.
    """
    for name, v in (("s", s), ("b", b), ("h", h), ("a", a), ("t", t)):
        _check_pos(name, v)
    d_ff = 4 * h if d_ff is None else d_ff
    n_kv = a if n_kv_heads is None else n_kv_heads
    _check_pos("d_ff", d_ff)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r}: use one of {', '.join(RECOMPUTE)}")
    _check_recipe(attention, mlp, dropout)
    if h % a:
        raise ValueError(f"h={h} must be divisible by a={a} heads")
    if a % t:
        raise ValueError(f"TP={t} must divide the number of heads a={a}: lower TP")
    if d_ff % t:
        raise ValueError(f"TP={t} must divide d_ff={d_ff}: lower TP")
    if sp and s % t:
        raise ValueError(f"sequence parallelism needs TP={t} to divide s={s}: change s or TP")
    if a % n_kv:
        raise ValueError(f"a={a} heads must be a multiple of n_kv_heads={n_kv} (each KV head "
                         "serves a whole group of query heads): change n_kv_heads")
    dh = h // a
    kv_r = kv_heads_per_rank(n_kv, t, n_heads=a)
    seq = s // t if sp else s  # rows of the tensors in the LayerNorm/dropout regions
    if recompute == "full":
        return {"layer_input": act_bytes * seq * b * h}
    heads = a // t
    ff = d_ff // t
    terms = {
        "ln1_input": act_bytes * seq * b * h,
        "qkv_input": act_bytes * seq * b * h,
        "q": act_bytes * s * b * heads * dh,
        "k": act_bytes * s * b * kv_r * dh,
        "v": act_bytes * s * b * kv_r * dh,
    }
    if attention == "flash":
        terms["softmax_lse"] = lse_bytes * b * heads * s
    elif recompute != "selective":
        terms["softmax_output"] = act_bytes * b * heads * s * s
        if dropout:
            terms["softmax_dropout_mask"] = mask_bytes * b * heads * s * s
            terms["softmax_dropout_output"] = act_bytes * b * heads * s * s
    terms["attn_proj_input"] = act_bytes * s * b * heads * dh
    if dropout:
        terms["attn_dropout_mask"] = mask_bytes * seq * b * h
    terms["ln2_input"] = act_bytes * seq * b * h
    terms["fc1_input"] = act_bytes * seq * b * h
    if mlp == "swiglu":
        terms["gate_input"] = act_bytes * s * b * ff
        terms["up_output"] = act_bytes * s * b * ff
    else:
        terms["gelu_input"] = act_bytes * s * b * ff
    terms["fc2_input"] = act_bytes * s * b * ff
    if dropout:
        terms["mlp_dropout_mask"] = mask_bytes * seq * b * h
    return terms


def activation_bytes_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none",
    d_ff: int | None = None, n_kv_heads: int | None = None, act_bytes: int = 2,
    mask_bytes: int = 1, *, attention: str = "eager", mlp: str = "gelu", dropout: bool = True,
    lse_bytes: int = 4,
) -> int:
    """Activation bytes one rank keeps per layer (sum of :func:`activation_terms_per_layer`).

    With ``d_ff=4h``, ``n_kv_heads=a``, 2-byte activations, 1-byte masks and the default recipe
    (eager attention, GELU, dropout) this equals :func:`korthikanti_activation_bytes`
    (eqs. (1)-(3) of Korthikanti et al. 2022).
    """
    return sum(activation_terms_per_layer(
        s, b, h, a, t, sp, recompute, d_ff, n_kv_heads, act_bytes, mask_bytes,
        attention=attention, mlp=mlp, dropout=dropout, lse_bytes=lse_bytes).values())


def model_activation_terms(
    model: ModelConfig, s: int, b: int = 1, t: int = 1, sp: bool | None = None,
    recompute: str = "none", *, attention: str | None = None, dropout: bool | None = None,
    act_bytes: int = 2, mask_bytes: int = 1,
) -> dict[str, int]:
    """:func:`activation_terms_per_layer` for a :mod:`tpp.models` preset and its recipe.

    ``attention`` and ``dropout`` default to what the model's published training used
    (``model.attention``, ``model.dropout``); ``sp`` defaults to on when ``t > 1`` (Megatron's
    and Llama 3's choice) and may be switched off.
    """
    if not isinstance(model, ModelConfig):
        raise ValueError("model must be a tpp.models.ModelConfig: use tpp.models.model(name)")
    sp = t > 1 if sp is None else sp
    if not isinstance(sp, bool):
        raise ValueError(f"sp={sp!r} must be True, False or None (None: on when TP > 1)")
    return activation_terms_per_layer(
        s, b, model.d_model, model.n_heads, t, sp, recompute, model.d_ff, model.n_kv_heads,
        act_bytes, mask_bytes, attention=model.attention if attention is None else attention,
        mlp=model.mlp, dropout=model.dropout if dropout is None else dropout)


#: The runtime reserve's parts and their sources (see :func:`runtime_reserve_terms`).
CUDA_CONTEXT_BYTES = 750 * 2**20
NCCL_COMMUNICATOR_BYTES = 4 * 2**20 * 32 * 2  # NCCL DEFAULT_BUFFSIZE x MAXCHANNELS/2 x 2
#: Megatron-LM's estimator's "buffer for optimizer and miscellaneous temporaries (5% overhead)"
#: (``megatron/training/theoretical_memory_usage.py`` @ d98e8a64ddf34856e74b24714e3bedb2f5a39553):
#: an allowance, not a measurement; pass it as ``fragmentation=`` to use it.
MEGATRON_OVERHEAD = Fraction(5, 100)
#: The default share of the transient bytes charged for fragmentation and temporaries: none,
#: because no measurement that applies to the runs is cited (see :func:`runtime_reserve_terms`).
FRAGMENTATION = Fraction(0)


def runtime_reserve_terms(
    transient: int, communicators: int = 1, *, cuda_context: int = CUDA_CONTEXT_BYTES,
    nccl_per_communicator: int = NCCL_COMMUNICATOR_BYTES,
    fragmentation: Fraction | float = FRAGMENTATION,
) -> dict[str, int]:
    """Memory a training process holds beyond its tensors, in bytes, by part.

    * ``cuda_context``: the CUDA context and kernels of the process, "~700+ MB" as PyTorch's
      maintainers measure it (discuss.pytorch.org/t/high-gpu-memory-overhead/81330): 750 MiB.
    * ``nccl_buffers``: per communicator, NCCL's simple-protocol buffer ``DEFAULT_BUFFSIZE``
      = 4 MiB (``NCCL_BUFFSIZE``'s default, ``#define DEFAULT_BUFFSIZE (1 << 22)`` in
      NVIDIA/nccl ``src/init.cc`` @ 5067397c2676d5aed50042fc39e5c8ee96eb0027) per channel and
      ring connection, for 32 channels: the ring search's cap, ``ringGraph->maxChannels =
      MAXCHANNELS / 2`` (``src/init.cc``) with ``#define MAXCHANNELS 64``
      (``src/include/device.h``), same commit. The count a communicator ends with is chosen by
      NCCL's topology search (``NCCL_MAX_NCHANNELS`` caps it) and is not published for an H100
      node, so 32 is the source's ceiling for rings, not a measurement; the LL and LL128
      protocol buffers (``DEFAULT_LL_BUFFSIZE``, ``DEFAULT_LL128_BUFFSIZE``, same file) are not
      counted. Two ring connections: 256 MiB; one communicator per parallel dimension of
      degree > 1 (``communicators``).
    * ``fragmentation``: a share of the ``transient`` bytes (tensors allocated and freed every
      step: activations, re-materialised layers, logits, ZeRO-3 gathered parameters) for what
      the caching allocator cannot reuse and the step's short-lived temporaries. Default 0: no
      measurement that applies to the published runs is cited (an allocator's loss depends on
      its configuration, e.g. PyTorch's ``expandable_segments``), so none is charged, the same
      for every layout. :data:`MEGATRON_OVERHEAD` (5 %) is the ``overhead_factor = 1.05`` of
      Megatron-LM's ``megatron/training/theoretical_memory_usage.py`` (commit
      d98e8a64ddf34856e74b24714e3bedb2f5a39553, step "9. Add buffer for optimizer and
      miscellaneous temporaries (5% overhead)"), an estimator's allowance, not a measurement,
      that Megatron applies in ``compute_activation_memory_without_sp`` only (taken unless SP
      and selective recomputation are both on); pass it to charge it. Weights, gradients and
      optimizer states are allocated once, in large flat buffers, and are not charged.

    Every part is a parameter, so a reader can put what their own cluster measures.
    """
    for name, v in (("transient", transient), ("communicators", communicators),
                    ("cuda_context", cuda_context),
                    ("nccl_per_communicator", nccl_per_communicator)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"{name}={v!r} must be an int >= 0 (bytes or a count)")
    frag = fragmentation if type(fragmentation) is Fraction else Fraction(fragmentation)
    if not 0 <= frag < 1:
        raise ValueError(f"fragmentation={fragmentation!r} must be a share in [0, 1), e.g. "
                         "tpp.costs.memory.MEGATRON_OVERHEAD (0.05)")
    return {"cuda_context": cuda_context,
            "nccl_buffers": communicators * nccl_per_communicator,
            # ceil(frag x transient), in integers
            "fragmentation": -(-(transient * frag.numerator) // frag.denominator)}


def runtime_reserve_bytes(transient: int, communicators: int = 1, **kwargs) -> int:
    """Sum of :func:`runtime_reserve_terms`."""
    return sum(runtime_reserve_terms(transient, communicators, **kwargs).values())


def layer_params_per_rank(model: ModelConfig, t: int = 1, replicate_kv: bool = False) -> int:
    """Parameters of one layer held by one TP rank (weights sharded; norms replicated).

    Q, O and the MLP are split ``t`` ways. K and V are split ``t`` ways when ``t`` divides
    ``n_kv_heads``; with ``replicate_kv=True`` and ``t > n_kv_heads`` each rank holds one whole
    KV head. Norm weights (and biases of row-parallel layers) are replicated on every rank.
    """
    _check_pos("t", t)
    m = model
    # the GQA divisibility rules (heads, KV heads, replication) of tpp.tensor_parallel.attention
    kv_r = attention_split(m.n_heads, m.n_kv_heads, t, replicate_kv).kv_heads_per_rank
    if m.d_ff % t:
        raise ValueError(f"TP={t} must divide d_ff={m.d_ff}: lower TP")
    d, dh = m.d_model, m.d_head
    q_o = 2 * d * (m.n_heads // t) * dh
    kv = 2 * d * kv_r * dh
    mlp = (3 if m.mlp == "swiglu" else 2) * d * (m.d_ff // t)
    n = q_o + kv + mlp + 2 * m.norm_params
    if m.bias:
        n += (m.n_heads // t) * dh + 2 * kv_r * dh + d  # column biases sharded, O bias replicated
        n += (2 if m.mlp == "swiglu" else 1) * (m.d_ff // t) + d
    return n


def layer_weight_bytes_per_rank(
    model: ModelConfig, t: int = 1, dtype: str = "bf16", replicate_kv: bool = False
) -> int:
    """Bytes of one layer's weights on one TP rank (:func:`layer_params_per_rank` x dtype)."""
    b = Fraction(bytes_per_element(dtype)) * layer_params_per_rank(model, t, replicate_kv)
    return int(-(-b.numerator // b.denominator))
