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
with KV replication when ``t > n_kv_heads``); with ``d_ff = 4h`` and ``n_kv_heads = a`` it equals
the paper's forms exactly. ``tpp.tensor_parallel.block`` counts the tensors its simulated layer
keeps for backward and the tests assert the count equals these functions.
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
    "korthikanti_activation_bytes",
    "activation_bytes_per_layer",
    "activation_terms_per_layer",
    "kv_heads_per_rank",
    "layer_params_per_rank",
    "layer_weight_bytes_per_rank",
]

SCHEMES = ("none", "tp", "tp_sp")
RECOMPUTE = ("none", "selective", "full")


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


def activation_terms_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none",
    d_ff: int | None = None, n_kv_heads: int | None = None, act_bytes: int = 2,
    mask_bytes: int = 1,
) -> dict[str, int]:
    """The tensors one rank keeps for backward in one layer, by name, in bytes (ints).

    The generalisation of Korthikanti et al. 2022 Sec. 4.1 (attention 11sbh + 5as^2b, MLP
    19sbh, two LayerNorms 4sbh) to any ``d_ff`` and ``n_kv_heads``. Names match the keys the
    simulated block (``tpp.tensor_parallel.block``) records.
    """
    for name, v in (("s", s), ("b", b), ("h", h), ("a", a), ("t", t)):
        _check_pos(name, v)
    d_ff = 4 * h if d_ff is None else d_ff
    n_kv = a if n_kv_heads is None else n_kv_heads
    _check_pos("d_ff", d_ff)
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute={recompute!r}: use one of {', '.join(RECOMPUTE)}")
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
    terms = {
        "ln1_input": act_bytes * seq * b * h,
        "qkv_input": act_bytes * seq * b * h,
        "q": act_bytes * s * b * (a // t) * dh,
        "k": act_bytes * s * b * kv_r * dh,
        "v": act_bytes * s * b * kv_r * dh,
        "softmax_output": act_bytes * b * (a // t) * s * s,
        "softmax_dropout_mask": mask_bytes * b * (a // t) * s * s,
        "softmax_dropout_output": act_bytes * b * (a // t) * s * s,
        "attn_proj_input": act_bytes * s * b * (a // t) * dh,
        "attn_dropout_mask": mask_bytes * seq * b * h,
        "ln2_input": act_bytes * seq * b * h,
        "fc1_input": act_bytes * seq * b * h,
        "gelu_input": act_bytes * s * b * (d_ff // t),
        "fc2_input": act_bytes * s * b * (d_ff // t),
        "mlp_dropout_mask": mask_bytes * seq * b * h,
    }
    if recompute == "selective":
        for k in ("softmax_output", "softmax_dropout_mask", "softmax_dropout_output"):
            del terms[k]
    return terms


def activation_bytes_per_layer(
    s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none",
    d_ff: int | None = None, n_kv_heads: int | None = None, act_bytes: int = 2,
    mask_bytes: int = 1,
) -> int:
    """Activation bytes one rank keeps per layer (sum of :func:`activation_terms_per_layer`).

    With ``d_ff=4h``, ``n_kv_heads=a``, 2-byte activations and 1-byte masks this equals
    :func:`korthikanti_activation_bytes` (eqs. (1)-(3) of Korthikanti et al. 2022).
    """
    return sum(activation_terms_per_layer(s, b, h, a, t, sp, recompute, d_ff, n_kv_heads,
                                          act_bytes, mask_bytes).values())


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
