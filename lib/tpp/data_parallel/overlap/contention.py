"""How much slower the matmuls run while NCCL kernels hold SMs: the default and its sources.

NCCL runs its collectives as CUDA kernels: each channel is one thread block resident on one SM
for the whole collective, so while a collective overlaps a GEMM, the GEMM has fewer SMs.

* An H100 SXM has 132 SMs (NVIDIA H100 Tensor Core GPU Architecture whitepaper, 2022, Table 3).
* An FSDP-style all-gather profiled with Nsight Systems on an H100 launched 24 NCCL blocks
  beside a 132-block GEMM, and the GEMM's MFU fell from about 80 % to 47 % because the
  displaced blocks ran in a second wave (NVIDIA developer forum, "Compute-Communication Overlap
  Causes Severe GEMM Performance Degradation because of Tail Effect", 2025,
  https://forums.developer.nvidia.com/t/337991).
* Megatron-LM's ``nccl_ub`` option (NCCL user buffers, "SM efficient") lists the SMs its
  all-gather / reduce-scatter then use: 4 / 5 inside NVLink, 16 / 16 across NVLink + IB without
  SHARP, 1 / 4 over IB alone (NVIDIA/Megatron-LM, megatron/core/distributed/
  distributed_data_parallel_config.py, commit 001199898c4badd01eaf0785c212d8ed7ce83042): the
  SM-efficient path still takes 16 of 132 SMs (0.12) for a DP collective across nodes.
* Across ML kernels on GPUs, concurrent computation and communication realised on average only
  21 % of the ideal speed-up (serial time versus the larger of the two isolated times), 42 % with
  stream priorities and compute-unit partitioning (Agrawal et al. 2024, "Optimizing ML
  Concurrent Computation and Communication with GPU DMA Engines", arXiv:2412.14335, abstract).

The default is the SM share NCCL's blocks take, ``24 / 132 = 0.18``: a compute op that overlaps
a collective runs at ``1 - 0.18`` of its speed. It is a lower bound of the slowdown (the forum's
wave-quantised GEMM lost 41 %, and Agrawal et al.'s average implies more): pass ``contention=``
to :func:`tpp.data_parallel.overlap.step_timeline` to use another value, 0 for none.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["H100_SMS", "NCCL_BLOCKS", "NCCL_SM_SLOWDOWN", "sm_share"]

#: Streaming multiprocessors of an H100 SXM (NVIDIA H100 whitepaper, 2022).
H100_SMS = 132
#: NCCL thread blocks (channels) one all-gather launched on an H100 (NVIDIA forum t/337991).
NCCL_BLOCKS = 24


def sm_share(nccl_blocks: int = NCCL_BLOCKS, sms: int = H100_SMS) -> Fraction:
    """Share of the GPU's SMs NCCL's blocks hold: ``nccl_blocks / sms`` (one block per SM)."""
    for name, v in (("nccl_blocks", nccl_blocks), ("sms", sms)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be an int >= 1")
    if nccl_blocks >= sms:
        raise ValueError(f"nccl_blocks={nccl_blocks} must be fewer than the GPU's {sms} SMs")
    return Fraction(nccl_blocks, sms)


#: Default compute slowdown while a collective runs (0.18): see the module docstring.
NCCL_SM_SLOWDOWN: float = float(sm_share())
