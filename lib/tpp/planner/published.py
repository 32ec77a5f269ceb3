"""Parallel layouts published with their systems, for the planner to check.

Each entry: the model preset, GPU preset, the published layout, the batch and sequence, and what
the paper reports (per-GPU throughput or MFU), with the table it comes from. Fields the papers do
not state (microbatch size, recomputation, ZeRO stage) are our assumptions and say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpp import models as _models
from tpp.models import MEGATRON_README_H100, NARAYANAN_TABLE1
from tpp.planner.layout import Layout

__all__ = ["Published", "PUBLISHED", "HOLDOUT", "published"]


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
    #: what was measured: seconds per step, or TFLOP/s per GPU under ``flops`` below
    measured: float = 0.0
    #: "step_time" (seconds), "tokens_per_gpu_s" (torchtitan's WPS), "hfu" (TFLOP/s counting
    #: the recompute forward, Narayanan et al. 2021 eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh))
    #: or "mfu" (TFLOP/s of 3 passes, Megatron's count with full s x s attention:
    #: :attr:`tpp.planner.Estimate.model_flops_per_step`)
    metric: str = "step_time"
    #: kernel choices of the run's software: attention kernel and whether the gradient
    #: reduction overlaps the backward
    attention: str = "flash2"
    dp_overlap: bool = True
    #: TP collectives overlapped with the GEMMs (Megatron-LM's ``--tp-comm-overlap``), when the
    #: source says the run used it; else blocking
    tp_comm_overlap: bool = False
    #: the network between nodes (None: :func:`tpp.planner.default_inter_link`)
    inter_link: str | None = None
    #: bytes per gradient element the run keeps (2: bf16; 4: fp32 accumulation, e.g. Llama 3)
    grad_bytes: int = 2
    #: a hold-out run: added after the planner's components and defaults were settled, never
    #: used to adjust them; its error is reported apart (:data:`HOLDOUT`)
    holdout: bool = False

    @property
    def gpus(self) -> int:
        return self.layout.gpus

    def measured_step_time(self, model_flops_per_step: float) -> float:
        """Seconds per step the source measured (``model_flops_per_step``: Megatron's 3-pass
        count, used for the "mfu" metric)."""
        if self.metric == "step_time":
            return self.measured
        if self.metric == "tokens_per_gpu_s":
            return self.global_batch * self.seq_len / (self.measured * self.gpus)
        if self.metric == "hfu":
            m = _models.model(self.model)
            B, s, L, h, V = (self.global_batch, self.seq_len, m.n_layers, m.d_model,
                             m.vocab_size)
            flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
            return flops / (self.measured * 1e12 * self.gpus)
        return model_flops_per_step / (self.measured * 1e12 * self.gpus)


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
        Layout(tp=_t, pp=_p, dp=_g // (_t * _p), microbatch_size=1, recompute="full",
               sp=False),
        2048, _B, f"{_tf} teraFLOP/s per GPU, {_pct}% of peak",
        "Narayanan et al. 2021 (arXiv:2104.04473), Table 1 (A100 80GB, 8 per node, "
        "8 x 200 Gb/s InfiniBand HDR per node)",
        "microbatch size 1, full activation recomputation, no ZeRO, no interleaving, no "
        "sequence parallelism (2021), eager attention, gradient all-reduce after the backward "
        "(not in Table 1)", measured=_tf, metric="hfu", attention="eager", dp_overlap=False,
    )

_L3T4 = ("Dubey et al. 2024 (arXiv:2407.21783), Table 4: 405B pre-training, H100 80GB, 8 per "
         "server, 400 Gb/s per GPU")
#: What Dubey et al. 2024, Sec. 3.3.2 ("Parallelism for model scaling") documents of the 405B
#: run's memory, and where the planner meets it (FROM THE PAPER):
#:
#: * TP, CP, PP, DP, sequence length and "batch size/DP" of each row: Table 4;
#: * FSDP "shards optimizer states and gradients, but not model parameters after the forward"
#:   (weights are not resharded after the forward): ``zero=2`` (full weights of the stage held
#:   through forward and backward, states and gradients sharded over DP x CP);
#: * "FP32 gradient accumulation during backward computation over multiple micro-batches" and
#:   gradients reduce-scattered "in FP32" (Sec. 3.3.2, numerical stability): ``grad_bytes=4``;
#: * "we reduce one Transformer layer each from the first and the last stages, respectively.
#:   This means that the first model chunk on the first stage has only the embedding, and the
#:   last model chunk on the last stage has only output projection and loss calculation":
#:   a chunk holds one slot, so 126 layers + embedding + head = 128 one-slot chunks over
#:   PP = 16 ranks, i.e. ``virtual = 128 / 16 = 8`` (the "V pipeline stages on one pipeline
#:   rank" of the interleaved schedule), 7 layers on the first and the last rank and 8 on the
#:   others (:func:`tpp.planner.layout.layers_per_chunk`, :func:`~tpp.planner.layout.max_chunks`);
#: * 8K sequences "without activation checkpointing": ``recompute="none"`` for the 8K runs;
#: * input and output tensors of each stage "proactively deallocated": the planner keeps no
#:   stage-output copy (its in-flight bytes are the layers' own activations, the received input
#:   counted once as the first layer's saved input), i.e. it already counts the deallocated
#:   state: Megatron-LM's ``deallocate_output_tensor`` (``deallocate_pipeline_outputs``,
#:   ``megatron/core/pipeline_parallel/schedules.py`` @ d98e8a64) frees the same tensor;
#: * an interleaved schedule with a tunable number ``N`` of contiguous microbatches (Fig. 6),
#:   "finding a sweet spot between DFS and breadth first schedule (BFS)", i.e. ``P <= N <= M``;
#:   the value the 405B runs used is not stated.
#:
#: OUR ASSUMPTIONS (the paper does not give them), each the planner's default:
#:
#: * ``N = P`` (Megatron-LM's default ``microbatch_group_size_per_vp_stage``; its
#:   ``forward_backward_pipelining_with_interleaving`` in
#:   ``megatron/core/pipeline_parallel/schedules.py`` @ d98e8a64ddf34856e74b24714e3bedb2f5a39553
#:   raises unless ``P <= N <= M`` and warms up ``2 (P - r - 1) + (v - 1) N`` chunks, so a larger
#:   ``N`` holds *more* in flight: ``N = P`` is the least memory the paper's schedule can hold;
#:   PyTorch 2.13's flexible ``ScheduleInterleaved1F1B`` ("flex_pp") takes ``N = P`` for
#:   ``M = 32``, and its order holds the same chunks on rank 1: tests/test_planner_pytorch.py);
#: * microbatch size 1 sequence; FlashAttention-2 kernels (the paper names no kernel); fp32
#:   Adam moments and fp32 master weights; selective recomputation at 128K (the paper says
#:   nothing of the 128K stage; with a flash kernel selective and none hold the same bytes in
#:   :func:`tpp.costs.memory.model_activation_terms`).
_L3_ASSUMED = ("not stated in the paper, our assumptions (the planner's defaults): microbatch "
               "size 1; N = P contiguous microbatches (Megatron's default, the least in flight); "
               "FlashAttention-2 kernels; fp32 Adam moments and fp32 master weights; selective "
               "recomputation at 128K. From Sec. 3.3.2: ZeRO-2-like FSDP (weights not resharded "
               "after the forward), fp32 gradients, v = 8 (the first chunk holds only the "
               "embedding and the last only the head: 128 one-slot chunks on 16 ranks), no "
               "activation checkpointing at 8K")
for _key, _lay, _s, _B, _rep in (
    ("llama3_405b_8k_8192", Layout(tp=8, pp=16, dp=64, virtual=8, zero=2,
                                    recompute="none"), 8192, 2048, "430 TFLOPs/GPU, 43% MFU"),
    ("llama3_405b_8k_16384", Layout(tp=8, pp=16, dp=128, virtual=8, zero=2,
                                     recompute="none"), 8192, 2048,
     "400 TFLOPs/GPU, 41% MFU"),
    ("llama3_405b_128k_16384", Layout(tp=8, cp=16, pp=16, dp=8, virtual=8, zero=2,
                                       recompute="selective"), 131072, 128,
     "380 TFLOPs/GPU, 38% MFU"),
):
    PUBLISHED[_key] = Published(_key, "llama3_405b", "h100_sxm", _lay, _s, _B, _rep, _L3T4,
                                _L3_ASSUMED, measured=float(_rep.split()[0]), metric="mfu",
                                grad_bytes=4)

#: Korthikanti et al. 2022 (arXiv:2205.05198), Table 3 (configurations: TP 8, sequence 2048,
#: microbatch 1, one pipeline; GPUs and global batch 8/4, 64/64, 280/280, 512/512) and
#: Table 5 (seconds per iteration,
#: "full recompute" without SP against "present work" = SP + selective recompute).
_K22 = (("22b", 1, 8, 4, 1.42, 1.10), ("175b", 8, 64, 64, 18.13, 13.75),
        ("530b", 35, 280, 280, 49.05, 37.83), ("1t", 64, 512, 512, 94.42, 71.49))
for _n, _p, _g, _bs, _full, _sel in _K22:
    for _how, _t_it, _rc, _sp in (("full", _full, "full", False),
                                  ("selective", _sel, "selective", True)):
        _key = f"korthikanti2022_{_n}_{_how}"
        PUBLISHED[_key] = Published(
            _key, f"megatron_{_n}", "a100_sxm_80gb",
            Layout(tp=8, pp=_p, dp=_g // (8 * _p), recompute=_rc, sp=_sp), 2048, _bs,
            f"{_t_it} s per iteration",
            "Korthikanti et al. 2022 (arXiv:2205.05198), Tables 3 and 5 (A100 80GB, Selene)",
            "no interleaving, eager (non-flash) attention (not stated in Tables 3 and 5)",
            measured=_t_it, metric="step_time", attention="eager", dp_overlap=False)


def published(key: str) -> Published:
    """The published run called ``key`` (see :data:`PUBLISHED`)."""
    if key not in PUBLISHED:
        raise ValueError(f"unknown published layout {key!r}: use one of {', '.join(PUBLISHED)}")
    return PUBLISHED[key]

#: BLOOM 176B (Scao et al. 2022, arXiv:2211.05100, Sec. 3.4 and Table 1): 70 layers, h=14336,
#: 112 heads, vocab 250,880, GELU, LayerNorm, biases, tied embeddings, ALiBi (no learned
#: positions); trained on 384 A100 80GB (48 nodes of 8) with TP 4, PP 12, DP 8, ZeRO-1,
#: sequence 2048, global batch 2048, microbatch 2; "156 TFLOPs in our fastest configuration".
_models.MODELS.setdefault("bloom_176b", _models.ModelConfig(
    "BLOOM 176B", 70, 14336, 112, 112, 4 * 14336, 250880, 176e9,
    "Scao et al. 2022 (BLOOM, arXiv:2211.05100), Table 1: 70 layers, h=14336, 112 heads, "
    "d_ff=4h, vocab 250880, ALiBi", mlp="gelu", norm="layernorm", bias=True,
    tied_embeddings=True))
PUBLISHED["bloom_176b"] = Published(
    "bloom_176b", "bloom_176b", "a100_sxm_80gb",
    Layout(tp=4, pp=12, dp=8, microbatch_size=2, zero=1, recompute="full", sp=False), 2048,
    2048, "156 TFLOP/s per GPU",
    "Scao et al. 2022 (arXiv:2211.05100), Sec. 3.4 (Megatron-DeepSpeed, 384 A100 80GB, 8 per "
    "node, 4 x 100 Gb/s Omni-Path per node (Jean Zay))",
    "full activation recomputation (Megatron-DeepSpeed's checkpoint-activations, counted in "
    "its TFLOP/s as Narayanan's 96 B s l h^2 formula), eager fused-softmax attention, gradient "
    "reduction after the pipeline flush",
    measured=156.0, metric="hfu", attention="eager", dp_overlap=False,
    inter_link="opa_100_x4_per_node")

#: torchtitan (pytorch/torchtitan, docs/performance.md at commit 0413364349): Llama 3 on 64
#: A100 80GB with FSDP2, local batch 1 (global 64), sequence 8192, tokens per second per GPU
#: ("WPS"): 8B with selective-op checkpointing 2973 (58.2 % MFU), 70B with full 331 (51.7 %).
_TT = ("torchtitan docs/performance.md (pytorch/torchtitan @ "
       "041336434916bdc0f88c1f89fda176fd3c2092e4), Llama 3 table: 64 A100 80GB, FSDP2")
for _key, _m, _rc, _wps in (("torchtitan_llama3_8b", "llama3_8b", "selective", 2973.0),
                            ("torchtitan_llama3_70b", "llama3_70b", "full", 331.0)):
    PUBLISHED[_key] = Published(
        _key, _m, "a100_sxm_80gb", Layout(dp=64, zero=3, recompute=_rc), 8192, 64,
        f"{_wps:g} tokens/s per GPU", _TT,
        "sequence 8192 (Llama 3's), selective-op checkpointing taken as selective, PyTorch SDPA "
        "taken as FlashAttention-2, FSDP2 as ZeRO-3 with one unit per layer, InfiniBand HDR per "
        "GPU (the cluster's network is not stated)", measured=_wps, metric="tokens_per_gpu_s")

#: HOLD-OUT: Megatron-LM's H100 weak-scaling table (NVIDIA/Megatron-LM README.md and
#: images/model_table.png @ f2e5db402c44ae309aa6448bcb4ae87e8ae0f5f4, 2024-07-15), added with
#: the planner's components and defaults frozen; no number was ever adjusted to them. One
#: configuration was added after their first comparison, read from the README, not fitted:
#: ``tp_comm_overlap`` (below), prompted by the TP > 1 rows predicted slow with blocking TP.
#: From the source: model shapes, TP, PP, DP, GPUs, global batch, sequence 4096, per-GPU TFLOP/s;
#: ``--overlap-grad-reduce --overlap-param-gather`` (which Megatron-LM only accepts with the
#: distributed optimizer, i.e. ZeRO-1: megatron/training/arguments.py at that commit) and
#: ``--tp-comm-overlap`` (which asserts sequence parallelism, same file). The TFLOP/s are
#: Megatron's ``num_floating_point_operations`` at that commit: 3 passes, full s x s
#: attention, the planner's ``model_flops_per_step``. Unknown, the planner's defaults:
#: microbatch 1, no interleaving, no recomputation, FlashAttention-2, fp32 Adam states,
#: bf16 gradients, InfiniBand NDR per GPU. The README (line 66 at that commit): "We perform
#: fine-grained overlapping of data-parallel (``--overlap-grad-reduce --overlap-param-gather``),
#: tensor-parallel (``--tp-comm-overlap``) and pipeline-parallel communication (enabled by
#: default) with computation": ``tp_comm_overlap=True`` (the planner's decomposed TP,
#: :func:`tpp.planner.exposed.tp_layer_times`).
_MLM_SRC = ("NVIDIA/Megatron-LM README.md and images/model_table.png @ "
            "f2e5db402c44ae309aa6448bcb4ae87e8ae0f5f4 (H100 weak scaling, 2024-07-15)")
for (_n, _a, _h, _L, _t, _p, _d, _g, _B, _tf, _mfu) in MEGATRON_README_H100:
    _key = f"megatron_h100_{_n:g}b".replace(".", "_")
    PUBLISHED[_key] = Published(
        _key, _key, "h100_sxm",
        Layout(tp=_t, pp=_p, dp=_d, zero=1, recompute="none", sp=True), 4096, _B,
        f"{_tf} TFLOP/s per GPU, {_mfu}% MFU", _MLM_SRC,
        "the planner's defaults: microbatch 1, no interleaving, no recomputation, "
        "FlashAttention-2, fp32 Adam states, InfiniBand NDR; from the README: "
        "--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap", measured=_tf,
        metric="mfu", tp_comm_overlap=True, holdout=True)

#: Keys of the hold-out runs (reported apart from the runs the planner was built against).
HOLDOUT: tuple[str, ...] = tuple(k for k, p in PUBLISHED.items() if p.holdout)
