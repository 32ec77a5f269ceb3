"""Named hardware presets (links and GPUs), each number with its source, and explicit units.

Units used throughout ``tpp``:

* bytes are integers; ``GB = 10**9`` bytes (decimal, as on datasheets), ``GiB = 2**30`` bytes
  (binary, as printed by ``nvidia-smi`` and most software). 80 GB is 74.5 GiB, not 80 GiB.
* bandwidths are in **bytes per second per direction** (``GB/s`` = 1e9 bytes/s). Datasheets often
  quote a *bidirectional* total (NVLink 4: "900 GB/s" = 450 GB/s each way) or a *bit* rate
  (InfiniBand NDR "400 Gb/s" = 50 GB/s). :func:`gbit_per_s` converts bits to bytes.
* FLOP/s are dense (no 2:4 sparsity) unless the name says otherwise.

Look presets up with :func:`link` and :func:`gpu`; an unknown name raises ``ValueError``
listing the valid names.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
    "DTYPE_BYTES", "bytes_per_element", "gbit_per_s", "to_GB", "to_GiB",
    "Link", "GPU", "LINKS", "GPUS", "link", "gpu", "link_names", "gpu_names", "cpu_count",
]

# --- units ------------------------------------------------------------------------------------
KB: int = 10**3
MB: int = 10**6
GB: int = 10**9
TB: int = 10**12
KiB: int = 2**10
MiB: int = 2**20
GiB: int = 2**30
TiB: int = 2**40

#: Bytes per element of each dtype. int4 is half a byte (a ``Fraction``).
DTYPE_BYTES: dict[str, int | Fraction] = {
    "fp64": 8,
    "float64": 8,
    "fp32": 4,
    "float32": 4,
    "tf32": 4,  # stored in 32 bits; only the tensor-core arithmetic is reduced
    "bf16": 2,
    "bfloat16": 2,
    "fp16": 2,
    "float16": 2,
    "fp8": 1,
    "int8": 1,
    "int4": Fraction(1, 2),
}


def bytes_per_element(dtype: str) -> int | Fraction:
    """Bytes per element of ``dtype`` ("bf16" -> 2, "fp32" -> 4, "int4" -> Fraction(1, 2))."""
    key = str(dtype).lower()
    if key not in DTYPE_BYTES:
        raise ValueError(
            f"unknown dtype {dtype!r}: use one of {', '.join(sorted(DTYPE_BYTES))}"
        )
    return DTYPE_BYTES[key]


def gbit_per_s(gbits: float) -> float:
    """Convert a link rate in Gb/s (10**9 *bits* per second) to bytes per second: x * 1e9 / 8."""
    if gbits < 0:
        raise ValueError(f"a link rate must be >= 0 Gb/s, got {gbits}")
    return gbits * 1e9 / 8


def to_GB(n_bytes: float) -> float:
    """Bytes -> GB (1 GB = 10**9 bytes)."""
    return n_bytes / GB


def to_GiB(n_bytes: float) -> float:
    """Bytes -> GiB (1 GiB = 2**30 bytes)."""
    return n_bytes / GiB


# --- links ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Link:
    """An interconnect, as seen by ONE GPU.

    ``bandwidth`` is bytes/s per direction available to one GPU (what a ring collective's
    ``bus_factor * payload / bandwidth`` needs); ``bidirectional`` is the datasheet's total of both
    directions (bytes/s); ``latency`` is an *assumed* per-step latency alpha (seconds), the order of
    magnitude of small-message collectives, and is stated as an assumption in ``latency_source``.
    """

    name: str
    bandwidth: float
    bidirectional: float
    latency: float
    scope: str
    source: str
    latency_source: str
    #: share of ``bandwidth`` a ring collective reaches as bus bandwidth (nccl-tests "busbw")
    collective_efficiency: float = 0.8

    @property
    def bus_bandwidth(self) -> float:
        """Bytes/s per direction a large ring collective achieves: ``collective_efficiency x
        bandwidth``. NCCL's nccl-tests report bus bandwidths of about 80 % of the line rate on
        NVLink and InfiniBand for large messages (NVIDIA, nccl-tests ``doc/PERFORMANCE.md``
        defines busbw; the 80 % is the issue-18 convention, e.g. ~370 GB/s of 450 on DGX H100,
        ~40 GB/s of 50 on NDR); :mod:`tpp.planner` uses this, the chapters' closed forms use
        the line rate."""
        return self.collective_efficiency * self.bandwidth

    @property
    def bandwidth_GBps(self) -> float:
        """Per-direction bandwidth in GB/s (1e9 bytes/s)."""
        return self.bandwidth / GB


_LAT_NV = "assumption: ~2 us per ring step inside an NVLink/NVSwitch node (order of magnitude)"
_LAT_PCIE = "assumption: ~5 us per ring step over PCIe (order of magnitude)"
_LAT_NET = "assumption: ~10 us per ring step between nodes (order of magnitude)"


def _pcie_x16_bytes_per_s(gt_per_s: float) -> float:
    """PCIe 3.0+ x16 payload rate per direction: GT/s x 16 lanes x 128/130 encoding / 8 bits."""
    return gt_per_s * 1e9 * 16 * 128 / 130 / 8


LINKS: dict[str, Link] = {
    "nvlink3": Link(
        "NVLink 3 (A100 SXM)", 300 * GB, 600 * GB, 2e-6, "intra-node",
        "NVIDIA A100 datasheet: NVLink 600 GB/s (bidirectional total; 12 links x 25 GB/s "
        "per direction = 300 GB/s each way)", _LAT_NV,
    ),
    "nvlink4": Link(
        "NVLink 4 (H100/H200 SXM)", 450 * GB, 900 * GB, 2e-6, "intra-node",
        "NVIDIA H100 datasheet: NVLink 900 GB/s (bidirectional total; 18 links x 25 GB/s "
        "per direction = 450 GB/s each way)", _LAT_NV,
    ),
    "nvlink5": Link(
        "NVLink 5 (B200)", 900 * GB, 1800 * GB, 2e-6, "intra-node",
        "NVIDIA Blackwell (B200) datasheet: NVLink 1.8 TB/s (bidirectional total; 900 GB/s "
        "each way)", _LAT_NV,
    ),
    "pcie4_x16": Link(
        "PCIe Gen4 x16", _pcie_x16_bytes_per_s(16), 2 * _pcie_x16_bytes_per_s(16), 5e-6,
        "intra-node",
        "PCI-SIG PCIe 4.0: 16 GT/s per lane, 128b/130b encoding; x16 = 31.5 GB/s per direction "
        "(often rounded to 32 GB/s, '64 GB/s' bidirectional)", _LAT_PCIE,
    ),
    "pcie5_x16": Link(
        "PCIe Gen5 x16", _pcie_x16_bytes_per_s(32), 2 * _pcie_x16_bytes_per_s(32), 5e-6,
        "intra-node",
        "PCI-SIG PCIe 5.0: 32 GT/s per lane, 128b/130b encoding; x16 = 63.0 GB/s per direction "
        "(H100 PCIe datasheet: 'PCIe Gen5 128 GB/s' bidirectional)", _LAT_PCIE,
    ),
    "ib_hdr": Link(
        "InfiniBand HDR (1 port per GPU)", gbit_per_s(200), 2 * gbit_per_s(200), 10e-6,
        "inter-node",
        "InfiniBand HDR: 200 Gb/s per port per direction = 25 GB/s (NVIDIA ConnectX-6)", _LAT_NET,
    ),
    "ib_ndr": Link(
        "InfiniBand NDR (1 port per GPU)", gbit_per_s(400), 2 * gbit_per_s(400), 10e-6,
        "inter-node",
        "InfiniBand NDR: 400 Gb/s per port per direction = 50 GB/s (NVIDIA ConnectX-7; DGX H100 "
        "has one 400 Gb/s port per GPU)", _LAT_NET,
    ),
    "opa_100_x4_per_node": Link(
        "Omni-Path 100 Gb/s, 4 ports per 8-GPU node", gbit_per_s(50), 2 * gbit_per_s(50), 10e-6,
        "inter-node",
        "Jean Zay as described by Scao et al. 2022 (BLOOM, arXiv:2211.05100, Sec. 3.4.1): 8 "
        "A100 per node and 4 Omni-Path 100 Gb/s links per node = 50 Gb/s = 6.25 GB/s per GPU",
        _LAT_NET,
    ),
    "eth_100g": Link(
        "Ethernet 100GbE", gbit_per_s(100), 2 * gbit_per_s(100), 10e-6, "inter-node",
        "IEEE 802.3ba: 100 Gb/s per direction = 12.5 GB/s", _LAT_NET,
    ),
    "eth_200g": Link(
        "Ethernet 200GbE", gbit_per_s(200), 2 * gbit_per_s(200), 10e-6, "inter-node",
        "IEEE 802.3bs: 200 Gb/s per direction = 25 GB/s", _LAT_NET,
    ),
    "eth_400g": Link(
        "Ethernet 400GbE", gbit_per_s(400), 2 * gbit_per_s(400), 10e-6, "inter-node",
        "IEEE 802.3bs: 400 Gb/s per direction = 50 GB/s", _LAT_NET,
    ),
}


# --- GPUs -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GPU:
    """An accelerator: memory capacity (bytes), HBM bandwidth (bytes/s), dense peak FLOP/s."""

    name: str
    memory: int
    memory_bandwidth: float
    peak_flops_bf16: float
    peak_flops_fp8: float
    link: str
    source: str
    #: achievable dense bf16 matmul FLOP/s of the best shape (a measured microbenchmark)
    matmul_flops_bf16: float = 0.0
    #: streaming multiprocessors (for wave quantization of GEMM tiles)
    sms: int = 1
    #: share of ``memory_bandwidth`` a streaming kernel reaches
    memory_efficiency: float = 0.9
    #: where ``matmul_flops_bf16``, ``sms`` and ``memory_efficiency`` come from
    compute_source: str = ""
    #: bytes the CUDA runtime reports as the device's total (``cudaMemGetInfo``), which is what
    #: a process allocates from; 0 when no measurement is cited (then :attr:`capacity` is the
    #: label ``memory``)
    runtime_memory: int = 0
    #: where ``runtime_memory`` comes from
    runtime_memory_source: str = ""

    @property
    def memory_GB(self) -> float:
        """Memory capacity in GB (1e9 bytes)."""
        return self.memory / GB

    @property
    def capacity(self) -> int:
        """Bytes a process can allocate from: :attr:`runtime_memory` (what the CUDA runtime
        reports, e.g. 79.11 GiB = 84.9e9 bytes on an H100 SXM 80GB) when a measurement is
        cited, else the datasheet label :attr:`memory`. The planner compares a layout's bytes,
        its runtime reserve (CUDA context, NCCL buffers, any allowance asked for:
        :func:`tpp.costs.memory.runtime_reserve_terms`) included, with this."""
        return self.runtime_memory or self.memory

    @property
    def memory_GiB(self) -> float:
        """Memory capacity in GiB (2**30 bytes)."""
        return self.memory / GiB

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte of HBM traffic above which bf16 matmuls are compute-bound."""
        return self.peak_flops_bf16 / self.memory_bandwidth

    @property
    def achievable_memory_bandwidth(self) -> float:
        """Bytes/s a memory-bound element-wise kernel reaches: ``memory_efficiency x HBM``."""
        return self.memory_efficiency * self.memory_bandwidth


_MAMF = ("Maximum Achievable Matmul FLOPS (MAMF), bf16, best shape, mean of 100 iterations: "
         "S. Bekman, ml-engineering, compute/accelerator/README.md (stas00/ml-engineering), "
         "table 'Maximum Achievable Matmul FLOPS comparison table': ")
_CUDA_TOTAL = ("PyTorch's out-of-memory error prints cudaMemGetInfo's device total as "
               "'GPU 0 has a total capacity of X' (c10/cuda/CUDACachingAllocator.cpp); ")
_HBM = ("; streaming kernels at 90 % of the datasheet HBM bandwidth (assumption: the order "
        "copy benchmarks such as BabelStream reach)")
GPUS: dict[str, GPU] = {
    "a100_sxm_80gb": GPU(
        "A100 SXM 80GB", 80 * GB, 2.039e12, 312e12, 0.0, "nvlink3",
        "NVIDIA A100 datasheet: 80 GB HBM2e, 2,039 GB/s, BF16 tensor core 312 TFLOP/s dense "
        "(624 with sparsity), no FP8",
        matmul_flops_bf16=271.2e12, sms=108,
        compute_source=_MAMF + "A100 SXM 271.2 TFLOP/s (86.9 % of 312); 108 SMs (NVIDIA "
        "A100 whitepaper)" + _HBM,
        runtime_memory=round(79.14 * GiB),
        runtime_memory_source=_CUDA_TOTAL + "79.14 GiB on an A100 80GB (GitHub "
        "lianqi1008/Control-GIC issue #6); other drivers report 79.25 and 79.33 GiB "
        "(levihsu/OOTDiffusion #235, hahnyuan/PB-LLM #3, A800 80GB): the smallest is taken. "
        "nvidia-smi lists 81920 MiB (modal-labs/modal-client PR #2797)",
    ),
    "h100_sxm": GPU(
        "H100 SXM 80GB", 80 * GB, 3.35e12, 989.4e12, 1978.9e12, "nvlink4",
        "NVIDIA H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, BF16 1,979 TFLOP/s with sparsity "
        "= 989.4 dense, FP8 3,958 sparse = 1,979 dense; memory 80e9 bytes (the label)",
        matmul_flops_bf16=794.5e12, sms=132,
        compute_source=_MAMF + "H100 SXM 794.5 TFLOP/s (80.3 % of 989); 132 SMs (NVIDIA "
        "H100 whitepaper)" + _HBM,
        runtime_memory=round(79.11 * GiB),
        runtime_memory_source=_CUDA_TOTAL + "79.11 GiB on an H100 80GB (GitHub "
        "vllm-project/vllm issue #27508). nvidia-smi lists 81559 MiB = 85.5e9 bytes for "
        "'NVIDIA H100 80GB HBM3' (NVIDIA/nccl issue #1264, wilicc/gpu-burn issue #114): the "
        "runtime's smaller figure is taken",
    ),
    "h100_pcie": GPU(
        "H100 PCIe 80GB", 80 * GB, 2.0e12, 756.5e12, 1513e12, "pcie5_x16",
        "NVIDIA H100 datasheet (PCIe): 80 GB HBM2e, 2 TB/s, BF16 1,513 TFLOP/s sparse = 756.5 "
        "dense, FP8 3,026 sparse = 1,513 dense; no runtime total cited: the 80e9-byte label",
        matmul_flops_bf16=0.80 * 756.5e12, sms=114,
        compute_source="no MAMF row for H100 PCIe: assumed 80 % of the dense peak, as measured "
        "on H100 SXM (" + _MAMF + "); 114 SMs (NVIDIA H100 whitepaper)" + _HBM,
    ),
    "h200_sxm": GPU(
        "H200 SXM 141GB", 141 * GB, 4.8e12, 989.4e12, 1978.9e12, "nvlink4",
        "NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, same Hopper compute as H100 SXM "
        "(BF16 989 TFLOP/s dense), NVLink 900 GB/s; no runtime total cited: the 141e9-byte "
        "label",
        matmul_flops_bf16=828.6e12, sms=132,
        compute_source=_MAMF + "GH200 SXM 828.6 TFLOP/s (the same H200 die, 141 GB HBM3e); "
        "132 SMs" + _HBM,
    ),
}


def _lookup(table: dict, name: str, kind: str):
    key = str(name).lower().replace("-", "_").replace(" ", "_")
    if key not in table:
        raise ValueError(f"unknown {kind} {name!r}: use one of {', '.join(table)}")
    return table[key]


def link(name: str) -> Link:
    """The :class:`Link` preset called ``name`` (e.g. "nvlink4", "ib_ndr", "pcie4_x16")."""
    return _lookup(LINKS, name, "link")


def gpu(name: str) -> GPU:
    """The :class:`GPU` preset called ``name`` (e.g. "h100_sxm", "h200_sxm")."""
    return _lookup(GPUS, name, "GPU")


def link_names() -> list[str]:
    """Names accepted by :func:`link`."""
    return list(LINKS)


def gpu_names() -> list[str]:
    """Names accepted by :func:`gpu`."""
    return list(GPUS)


def cpu_count() -> int:
    """CPU cores of this machine that this process may run on (its affinity, not the machine's
    total): the book build's processes, the grader's load scaling, side-by-side runs."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1
