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

from dataclasses import dataclass
from fractions import Fraction

__all__ = [
    "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
    "DTYPE_BYTES", "bytes_per_element", "gbit_per_s", "to_GB", "to_GiB",
    "Link", "GPU", "LINKS", "GPUS", "link", "gpu", "link_names", "gpu_names",
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

    @property
    def memory_GB(self) -> float:
        """Memory capacity in GB (1e9 bytes)."""
        return self.memory / GB

    @property
    def memory_GiB(self) -> float:
        """Memory capacity in GiB (2**30 bytes)."""
        return self.memory / GiB

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte of HBM traffic above which bf16 matmuls are compute-bound."""
        return self.peak_flops_bf16 / self.memory_bandwidth


GPUS: dict[str, GPU] = {
    "a100_sxm_80gb": GPU(
        "A100 SXM 80GB", 80 * GB, 2.039e12, 312e12, 0.0, "nvlink3",
        "NVIDIA A100 datasheet: 80 GB HBM2e, 2,039 GB/s, BF16 tensor core 312 TFLOP/s dense "
        "(624 with sparsity), no FP8",
    ),
    "h100_sxm": GPU(
        "H100 SXM 80GB", 80 * GB, 3.35e12, 989.4e12, 1978.9e12, "nvlink4",
        "NVIDIA H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, BF16 1,979 TFLOP/s with sparsity "
        "= 989.4 dense, FP8 3,958 sparse = 1,979 dense. Memory taken as 80e9 bytes (the label)",
    ),
    "h100_pcie": GPU(
        "H100 PCIe 80GB", 80 * GB, 2.0e12, 756.5e12, 1513e12, "pcie5_x16",
        "NVIDIA H100 datasheet (PCIe): 80 GB HBM2e, 2 TB/s, BF16 1,513 TFLOP/s sparse = 756.5 "
        "dense, FP8 3,026 sparse = 1,513 dense",
    ),
    "h200_sxm": GPU(
        "H200 SXM 141GB", 141 * GB, 4.8e12, 989.4e12, 1978.9e12, "nvlink4",
        "NVIDIA H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, same Hopper compute as H100 SXM "
        "(BF16 989 TFLOP/s dense), NVLink 900 GB/s",
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
