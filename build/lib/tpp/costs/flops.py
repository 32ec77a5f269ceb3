"""FLOPs of a transformer layer (matmuls only; 2 FLOPs per multiply-add).

Forward of one layer on ``b`` sequences of ``s`` tokens (Narayanan et al. 2021, Sec. 5.1,
counted per layer, with GQA and any ``d_ff``):

* projections: ``2 b s * (matmul params of the layer)``: Q, K, V, O and the MLP;
* attention scores ``Q K^T`` and ``P V``: ``2 * 2 b s^2 h`` (full ``s x s``, as Megatron counts;
  a causal kernel skips about half).

Backward costs twice the forward (input and weight gradients); full recomputation adds one more
forward. For LLaMA-style models the weight matmuls give the familiar ``6 N`` FLOPs per token for
training and ``2 N`` per generated token in decoding.
"""

from __future__ import annotations

from tpp.models import ModelConfig

__all__ = ["layer_matmul_params", "forward_flops_per_layer", "training_flops_per_layer",
           "decode_flops_per_token"]


def layer_matmul_params(model: ModelConfig) -> int:
    """Weights of one layer that take part in matmuls (no norms, no biases)."""
    d, dkv = model.d_model, model.d_kv
    return 2 * d * d + 2 * d * dkv + (3 if model.mlp == "swiglu" else 2) * d * model.d_ff


def forward_flops_per_layer(model: ModelConfig, b: int, s: int) -> int:
    """Forward FLOPs of one layer: ``2 b s * matmul_params + 4 b s^2 h``."""
    for name, v in (("b", b), ("s", s)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive int")
    return 2 * b * s * layer_matmul_params(model) + 4 * b * s * s * model.d_model


def training_flops_per_layer(model: ModelConfig, b: int, s: int, recompute: str = "none") -> int:
    """Forward + backward FLOPs of one layer: ``3 x forward`` (``4 x`` with full recompute)."""
    if recompute not in ("none", "selective", "full"):
        raise ValueError(f"recompute={recompute!r}: use 'none', 'selective' or 'full'")
    f = forward_flops_per_layer(model, b, s)
    extra = 4 * b * s * s * model.d_model if recompute == "selective" else 0
    return 3 * f + (f if recompute == "full" else extra)


def decode_flops_per_token(model: ModelConfig, n_params: float | None = None) -> float:
    """FLOPs to generate one token (one sequence of a decode batch): ``2 N`` (attention over the
    KV cache ignored). ``n_params`` overrides the computed parameter count (e.g. 70e9)."""
    n = model.params if n_params is None else n_params
    if not n > 0:
        raise ValueError(f"n_params={n_params!r} must be > 0")
    return 2 * n
