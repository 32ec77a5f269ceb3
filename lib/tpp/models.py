"""Named transformer configurations with sources, and their parameter counts computed from them.

Parameter count of a decoder-only transformer (no biases unless ``bias=True``):

* attention: ``d * (n_heads * d_head)`` (Q) + ``2 * d * (n_kv_heads * d_head)`` (K, V)
  + ``(n_heads * d_head) * d`` (O);
* MLP: ``3 * d * d_ff`` for SwiGLU (gate, up, down; Shazeer 2020), ``2 * d * d_ff`` for GELU;
* norms: ``d`` per RMSNorm, ``2 d`` per LayerNorm (scale and shift), two per layer + a final one;
* embeddings: ``vocab * d``, twice when the LM head is not tied; learned positions ``ctx * d``.

The count is compared with the nominal size in the model's name (:meth:`ModelConfig.nominal_error`).

Each preset also carries the training recipe its activation memory depends on
(:func:`tpp.costs.memory.model_activation_terms`): ``mlp``, ``attention`` (what the real
training run used) and ``dropout``.

* Llama 2 / Llama 3: SwiGLU, GQA (except Llama 2 7B), no dropout, fused attention. LLaMA
  (Touvron et al. 2023a, arXiv:2302.13971, Sec. 2.4) trains with "an efficient implementation of
  the causal multi-head attention" (xformers, with FlashAttention's backward) that saves memory
  "by not storing the attention weights"; Llama 2 keeps that pretraining setup (Touvron et
  al. 2023b, Sec. 2.2) and Llama 3 its architecture up to GQA and the vocabulary (Dubey et al.
  2024, Sec. 3.2). Neither paper lists dropout, and the reference model (meta-llama/llama
  ``llama/model.py``, commit 0504cf44) has no dropout layer.
* GPT-3 (Brown et al. 2020) and the Megatron GPT configs (Narayanan et al. 2021, Korthikanti
  et al. 2022): GELU, dropout 0.1 on the attention probabilities and hidden states (the defaults
  ``hidden_dropout = attention_dropout = 0.1`` of Megatron-LM's
  ``megatron/core/transformer/transformer_config.py``, commit d98e8a64), and the attention
  probabilities materialised (Megatron's fused scale-mask-softmax kernel writes the ``s x s``
  softmax; these runs predate FlashAttention): ``attention="eager"``, the layer whose ``5as/h``
  term Korthikanti et al. count.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tpp.hardware import bytes_per_element

__all__ = ["ModelConfig", "MODELS", "MEGATRON_README_H100", "model", "model_names"]


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer. ``d_model`` is the hidden size (Korthikanti's h)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    vocab_size: int
    nominal_params: float
    source: str
    mlp: str = "swiglu"
    norm: str = "rmsnorm"
    bias: bool = False
    tied_embeddings: bool = False
    learned_positions: int = 0
    attention: str = "flash"
    dropout: bool = False

    def __post_init__(self) -> None:
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff", "vocab_size"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads={self.n_heads} must be a multiple of n_kv_heads={self.n_kv_heads}"
            )
        if self.mlp not in ("swiglu", "gelu"):
            raise ValueError(f"mlp must be 'swiglu' or 'gelu', got {self.mlp!r}")
        if self.norm not in ("rmsnorm", "layernorm"):
            raise ValueError(f"norm must be 'rmsnorm' or 'layernorm', got {self.norm!r}")
        if self.attention not in ("flash", "eager"):
            raise ValueError(f"attention must be 'flash' (fused, no s x s scores kept) or "
                             f"'eager', got {self.attention!r}")
        if not isinstance(self.dropout, bool):
            raise ValueError(f"dropout must be True or False, got {self.dropout!r}")

    # -- shapes --------------------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        """Head dimension d_model / n_heads."""
        return self.d_model // self.n_heads

    @property
    def d_kv(self) -> int:
        """Width of K (and of V): n_kv_heads * d_head."""
        return self.n_kv_heads * self.d_head

    @property
    def group_size(self) -> int:
        """Query heads per KV head (1 for MHA)."""
        return self.n_heads // self.n_kv_heads

    # -- parameter counts ----------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Parameters of one attention sub-layer: 2 d^2 + 2 d d_kv (+ biases)."""
        d, dkv = self.d_model, self.d_kv
        n = 2 * d * d + 2 * d * dkv
        if self.bias:
            n += d + 2 * dkv + d
        return n

    @property
    def mlp_params(self) -> int:
        """Parameters of one MLP sub-layer: 3 d d_ff (SwiGLU) or 2 d d_ff (GELU) (+ biases)."""
        d, f = self.d_model, self.d_ff
        n = (3 if self.mlp == "swiglu" else 2) * d * f
        if self.bias:
            n += (2 * f if self.mlp == "swiglu" else f) + d
        return n

    @property
    def norm_params(self) -> int:
        """Parameters of one norm: d (RMSNorm) or 2d (LayerNorm)."""
        return self.d_model * (1 if self.norm == "rmsnorm" else 2)

    @property
    def params_per_layer(self) -> int:
        """Attention + MLP + two norms."""
        return self.attention_params + self.mlp_params + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        """Token embedding (+ untied LM head) (+ learned positions)."""
        n = self.vocab_size * self.d_model * (1 if self.tied_embeddings else 2)
        return n + self.learned_positions * self.d_model

    @property
    def params(self) -> int:
        """Total parameters: L * per-layer + embeddings + final norm."""
        return self.n_layers * self.params_per_layer + self.embedding_params + self.norm_params

    def nominal_error(self) -> float:
        """(computed - nominal) / nominal."""
        return (self.params - self.nominal_params) / self.nominal_params

    def weight_bytes(self, dtype: str = "bf16") -> int:
        """Bytes of all weights in ``dtype`` (an int; rounded up for sub-byte dtypes)."""
        b = Fraction(bytes_per_element(dtype)) * self.params
        return int(-(-b.numerator // b.denominator))

    def kv_cache_bytes_per_token(self, dtype: str = "bf16") -> int:
        """KV-cache bytes per token for the whole model: 2 (K and V) * L * d_kv * bytes."""
        b = Fraction(bytes_per_element(dtype)) * 2 * self.n_layers * self.d_kv
        return int(-(-b.numerator // b.denominator))


_L2 = (
    "Touvron et al. 2023 (Llama 2, arXiv:2307.09288) and the released config.json: "
)
_L3 = "Dubey et al. 2024 (The Llama 3 Herd of Models, arXiv:2407.21783), Table 3: "

MODELS: dict[str, ModelConfig] = {
    "llama2_7b": ModelConfig(
        "LLaMA-2 7B", 32, 4096, 32, 32, 11008, 32000, 7e9,
        _L2 + "32 layers, d=4096, 32 heads (MHA), d_ff=11008, vocab 32000, untied head",
    ),
    "llama2_70b": ModelConfig(
        "LLaMA-2 70B", 80, 8192, 64, 8, 28672, 32000, 70e9,
        _L2 + "80 layers, d=8192, 64 heads, 8 KV heads (GQA), d_ff=28672, vocab 32000",
    ),
    "llama3_8b": ModelConfig(
        "LLaMA-3 8B", 32, 4096, 32, 8, 14336, 128256, 8e9,
        _L3 + "32 layers, d=4096, 32 heads, 8 KV heads, d_ff=14336, vocab 128256",
    ),
    "llama3_70b": ModelConfig(
        "LLaMA-3 70B", 80, 8192, 64, 8, 28672, 128256, 70e9,
        _L3 + "80 layers, d=8192, 64 heads, 8 KV heads, d_ff=28672, vocab 128256",
    ),
    "llama3_405b": ModelConfig(
        "LLaMA-3 405B", 126, 16384, 128, 8, 53248, 128256, 405e9,
        _L3 + "126 layers, d=16384, 128 heads, 8 KV heads, d_ff=53248, vocab 128256",
    ),
    "gpt3_175b": ModelConfig(
        "GPT-3 175B", 96, 12288, 96, 96, 49152, 50257, 175e9,
        "Brown et al. 2020 (arXiv:2005.14165), Table 2.1: 96 layers, d=12288, 96 heads of 128, "
        "d_ff=4d, context 2048 (learned positions), GPT-2 BPE vocab 50257, tied embeddings, "
        "LayerNorm and biases",
        mlp="gelu", norm="layernorm", bias=True, tied_embeddings=True, learned_positions=2048,
        attention="eager", dropout=True,
    ),
}

_MEG = ("Korthikanti et al. 2022 (arXiv:2205.05198), Table 3 (configs of Narayanan et al. 2021): "
        "GPT-style, GELU MLP d_ff=4h, LayerNorm, biases, tied embeddings, sequence 2048, "
        "vocab 51200 (GPT-2 BPE padded): ")
for _key, _name, _L, _h, _a, _n in (
    ("megatron_22b", "Megatron GPT 22B", 48, 6144, 64, 22e9),
    ("megatron_175b", "Megatron GPT 175B", 96, 12288, 96, 175e9),
    ("megatron_530b", "Megatron GPT 530B", 105, 20480, 128, 530e9),
    ("megatron_1t", "Megatron GPT 1T", 128, 25600, 160, 1e12),
):
    MODELS[_key] = ModelConfig(
        _name, _L, _h, _a, _a, 4 * _h, 51200, _n,
        _MEG + f"{_L} layers, h={_h}, {_a} heads", mlp="gelu", norm="layernorm", bias=True,
        tied_embeddings=True, learned_positions=2048, attention="eager", dropout=True,
    )


_NAR = ("Narayanan et al. 2021 (arXiv:2104.04473), Table 1 (weak-scaling GPT models): GELU MLP "
        "d_ff=4h, LayerNorm, biases, tied embeddings, sequence 2048 (learned positions), vocab "
        "51200: ")
#: Narayanan et al. 2021, Table 1: (params in billions, heads, hidden, layers).
NARAYANAN_TABLE1 = (
    (1.7, 24, 2304, 24), (3.6, 32, 3072, 30), (7.5, 32, 4096, 36), (18.4, 48, 6144, 40),
    (39.1, 64, 8192, 48), (76.1, 80, 10240, 60), (145.6, 96, 12288, 80),
    (310.1, 128, 16384, 96), (529.6, 128, 20480, 105), (1008.0, 160, 25600, 128),
)
for _n, _a, _h, _L in NARAYANAN_TABLE1:
    MODELS[f"narayanan2021_{_n:g}b".replace(".", "_")] = ModelConfig(
        f"GPT {_n:g}B (Narayanan 2021)", _L, _h, _a, _a, 4 * _h, 51200, _n * 1e9,
        _NAR + f"{_L} layers, h={_h}, {_a} heads", mlp="gelu", norm="layernorm", bias=True,
        tied_embeddings=True, learned_positions=2048, attention="eager", dropout=True,
    )


_MLM_COMMIT = "f2e5db402c44ae309aa6448bcb4ae87e8ae0f5f4"
_MLM = (f"NVIDIA/Megatron-LM README.md and images/model_table.png @ {_MLM_COMMIT} (2024-07-15, "
        "'New scaling figures on H100 GPUs'): GPT models, vocabulary 131,072, sequence 4096; "
        "heads, hidden size and layers from the table. Not in the table, Megatron-LM's "
        "defaults at that commit (megatron/training/arguments.py): LayerNorm, biases, learned "
        "absolute positions, dropout 0.1; d_ff = 4h and untied embeddings (the only reading "
        "under which 12 L h^2 + 2 V h gives the table's sizes): ")
#: Megatron-LM's H100 weak-scaling table (README @ f2e5db40): (params in billions, heads,
#: hidden, layers, TP, PP, DP, GPUs, global batch, per-GPU TFLOP/s, MFU %).
MEGATRON_README_H100 = (
    (1.7, 16, 2048, 24, 1, 1, 48, 48, 192, 408.8, 41),
    (7.1, 32, 4096, 30, 2, 1, 48, 96, 192, 465.9, 47),
    (16.0, 48, 6144, 32, 4, 1, 48, 192, 192, 489.1, 49),
    (32.0, 56, 7168, 48, 8, 1, 48, 384, 192, 459.6, 46),
    (70.0, 64, 8192, 84, 8, 2, 48, 768, 384, 419.7, 42),
    (119.0, 80, 10240, 92, 8, 4, 48, 1536, 768, 420.5, 43),
    (177.0, 96, 12288, 96, 8, 6, 48, 2304, 1152, 432.8, 44),
    (314.0, 128, 16384, 96, 8, 8, 48, 3072, 1536, 474.4, 48),
    (462.0, 144, 18432, 112, 8, 16, 48, 6144, 3072, 459.9, 47),
)
for _n, _a, _h, _L, *_ in MEGATRON_README_H100:
    MODELS[f"megatron_h100_{_n:g}b".replace(".", "_")] = ModelConfig(
        f"GPT {_n:g}B (Megatron-LM H100 table)", _L, _h, _a, _a, 4 * _h, 131072, _n * 1e9,
        _MLM + f"{_L} layers, h={_h}, {_a} heads", mlp="gelu", norm="layernorm", bias=True,
        learned_positions=4096, attention="flash", dropout=True,
    )


def model(name: str) -> ModelConfig:
    """The :class:`ModelConfig` preset called ``name`` (e.g. "llama2_70b")."""
    key = str(name).lower().replace("-", "_").replace(" ", "_")
    if key not in MODELS:
        raise ValueError(f"unknown model {name!r}: use one of {', '.join(MODELS)}")
    return MODELS[key]


def model_names() -> list[str]:
    """Names accepted by :func:`model`."""
    return list(MODELS)
