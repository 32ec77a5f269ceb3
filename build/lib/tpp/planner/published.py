"""Parallel layouts published with their systems, for the planner to check.

Each entry: the model preset, GPU preset, the published layout, the batch and sequence, and what
the paper reports (per-GPU throughput or MFU), with the table it comes from. Fields the papers do
not state (microbatch size, recomputation, ZeRO stage) are our assumptions and say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpp.models import NARAYANAN_TABLE1
from tpp.planner.layout import Layout

__all__ = ["Published", "PUBLISHED", "published"]


@dataclass(frozen=True)
class Published:
    key: str
    model: str
    gpu: str
    layout: Layout
    seq_len: int
    global_batch: int
    reported: str
    source: str
    assumed: str

    @property
    def gpus(self) -> int:
        return self.layout.gpus


#: Narayanan et al. 2021, Table 1: TP, PP, GPUs, batch size, teraFLOP/s per GPU, % of peak.
_TABLE1_RUNS = (
    (1, 1, 32, 512, 137, 44), (2, 1, 64, 512, 138, 44), (4, 1, 128, 512, 142, 46),
    (8, 1, 256, 1024, 135, 43), (8, 2, 512, 1536, 138, 44), (8, 4, 1024, 1792, 140, 45),
    (8, 8, 1536, 2304, 148, 47), (8, 16, 1920, 2160, 155, 50), (8, 35, 2520, 2520, 163, 52),
    (8, 64, 3072, 3072, 163, 52),
)

PUBLISHED: dict[str, Published] = {}
for (_n, _a, _h, _L), (_t, _p, _g, _B, _tf, _pct) in zip(NARAYANAN_TABLE1, _TABLE1_RUNS,
                                                          strict=True):
    _key = f"narayanan2021_{_n:g}b".replace(".", "_")
    PUBLISHED[_key] = Published(
        _key, _key, "a100_sxm_80gb",
        Layout(tp=_t, pp=_p, dp=_g // (_t * _p), microbatch_size=1, recompute="full"),
        2048, _B, f"{_tf} teraFLOP/s per GPU, {_pct}% of peak",
        "Narayanan et al. 2021 (arXiv:2104.04473), Table 1 (A100 80GB, 8 per node, "
        "8 x 200 Gb/s InfiniBand HDR per node)",
        "microbatch size 1, full activation recomputation, no ZeRO, no interleaving "
        "(not in Table 1)",
    )

_L3T4 = ("Dubey et al. 2024 (arXiv:2407.21783), Table 4: 405B pre-training, H100 80GB, 8 per "
         "server, 400 Gb/s per GPU")
_L3_ASSUMED = ("microbatch size 1, interleaving v=4 (Sec. 3.3.2 uses an interleaved schedule; "
               "v not stated), selective recomputation, ZeRO-2-like sharding (Sec. 3.3.2: "
               "weights not resharded after forward)")
for _key, _lay, _s, _B, _rep in (
    ("llama3_405b_8k_8192", Layout(tp=8, pp=16, dp=64, virtual=4, zero=2,
                                    recompute="selective"), 8192, 2048, "430 TFLOPs/GPU, 43% MFU"),
    ("llama3_405b_8k_16384", Layout(tp=8, pp=16, dp=128, virtual=4, zero=2,
                                     recompute="selective"), 8192, 2048,
     "400 TFLOPs/GPU, 41% MFU"),
    ("llama3_405b_128k_16384", Layout(tp=8, cp=16, pp=16, dp=8, virtual=4, zero=2,
                                       recompute="selective"), 131072, 128,
     "380 TFLOPs/GPU, 38% MFU"),
):
    PUBLISHED[_key] = Published(_key, "llama3_405b", "h100_sxm", _lay, _s, _B, _rep, _L3T4,
                                _L3_ASSUMED)


def published(key: str) -> Published:
    """The published run called ``key`` (see :data:`PUBLISHED`)."""
    if key not in PUBLISHED:
        raise ValueError(f"unknown published layout {key!r}: use one of {', '.join(PUBLISHED)}")
    return PUBLISHED[key]
