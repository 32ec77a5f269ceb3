"""The communication one training step needs, per kind, as
:func:`tpp.data_parallel.overlap.step_timeline` takes it.

Every time comes from the library's alpha-beta model (:func:`tpp.collectives.alpha_beta_time`,
:func:`tpp.costs.tp.tp_comm_time`); nothing here re-derives a bus factor.

A :class:`Link` names the wire a collective uses. Traffic given the same link *name* shares it
and serializes (DP and PP on the node's NIC); different names run side by side (TP on NVLink,
DP on InfiniBand).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from numbers import Real

from tpp import hardware
from tpp.collectives import alpha_beta_time
from tpp.costs.tp import tp_comm_time

__all__ = ["Link", "DPTraffic", "TPTraffic", "CPTraffic", "PPTraffic", "DDP_BUCKET_BYTES"]

#: alpha-beta times are pure functions of their arguments: cache them (timelines repeat sizes)
_alpha_beta_time = lru_cache(maxsize=65536)(alpha_beta_time)

#: PyTorch DDP's default bucket, ``bucket_cap_mb=25`` (pytorch/pytorch,
#: torch/nn/parallel/distributed.py; its README in benchmarks/distributed/ddp; issue #118421).
DDP_BUCKET_BYTES = 25 * 2**20


def _positive(name: str, v, allow_zero: bool = False) -> None:
    ok = isinstance(v, Real) and not isinstance(v, bool) and (v >= 0 if allow_zero else v > 0)
    if not ok:
        raise ValueError(f"{name}={v!r} must be a number {'>= 0' if allow_zero else '> 0'}")


def _int(name: str, v, low: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ValueError(f"{name}={v!r} must be an int >= {low}")


@dataclass(frozen=True)
class Link:
    """A wire: ``name`` (the stream; traffic with the same name serializes), ``bandwidth`` in
    bytes/s per direction, ``latency`` alpha in s per ring step."""

    name: str
    bandwidth: float
    latency: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or self.name == "compute":
            raise ValueError(f"link name {self.name!r}: use a non-empty name other than "
                             "'compute' (e.g. 'nvlink', 'nic')")
        _positive("bandwidth", self.bandwidth)
        _positive("latency", self.latency, allow_zero=True)

    @classmethod
    def preset(cls, preset: str, name: str | None = None) -> Link:
        """A :mod:`tpp.hardware` link preset (``"nvlink4"``, ``"ib_ndr"``...) under ``name``."""
        hw = hardware.link(preset)
        return cls(name or preset, hw.bandwidth, hw.latency)

    def time(self, op: str, payload_bytes: int, n: int) -> float:
        """Seconds of one ring ``op`` of ``payload_bytes`` over ``n`` ranks on this link."""
        return _alpha_beta_time(op, int(payload_bytes), n, self.bandwidth, self.latency)


@dataclass(frozen=True)
class DPTraffic:
    """Data parallelism with ZeRO ``stage`` over ``group_size`` ranks on ``link``.

    ``layer_bytes``: bytes of one layer's 16-bit parameters (= its gradient), one int per layer
    (fold the embedding into the first layer and the LM head into the last) or one int for all.

    * stage 0 (DDP): gradients all-reduced in buckets of ``bucket_bytes``, filled in reverse
      layer order, each launched when its last gradient is ready (PyTorch DDP), behind the last
      microbatch's backward (``overlap_grad_reduce``; else after the backward);
    * stage 1 (distributed optimizer): the same buckets reduce-scattered; after the optimizer
      step each layer's parameters are all-gathered; with ``overlap_param_gather`` the gathers
      run behind the next step's forward (Megatron-LM's ``--overlap-param-gather``: the forward
      of layer ``i`` waits for its own gather, issued ``prefetch`` layers ahead), else exposed;
    * stage 2: as stage 1, but every microbatch's gradients are reduce-scattered;
    * stage 3 (FSDP): per microbatch, each layer (FSDP unit) all-gathered before its forward and
      again before its backward, ``prefetch`` units ahead, and its gradient reduce-scattered
      right after its backward.

    ``optimizer_time``: seconds of the optimizer step (compute, after the gradient reductions).
    """

    stage: int
    group_size: int
    layer_bytes: int | tuple[int, ...]
    link: Link
    bucket_bytes: int = DDP_BUCKET_BYTES
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    prefetch: int = 1
    optimizer_time: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.stage, bool) or self.stage not in (0, 1, 2, 3):
            raise ValueError(f"ZeRO stage={self.stage!r}: use 0 (DDP), 1 (distributed "
                             "optimizer), 2 (+ gradients) or 3 (FSDP)")
        _int("group_size", self.group_size, 1)
        _int("bucket_bytes", self.bucket_bytes, 1)
        _int("prefetch", self.prefetch, 0)
        _positive("optimizer_time", self.optimizer_time, allow_zero=True)
        if not isinstance(self.link, Link):
            raise ValueError("link must be a tpp.data_parallel.overlap.Link, "
                             "e.g. Link.preset('ib_ndr', 'nic')")
        lb = self.layer_bytes
        vals = (lb,) if isinstance(lb, int) and not isinstance(lb, bool) else tuple(lb)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in vals):
            raise ValueError(f"layer_bytes={lb!r} must be an int >= 0 or one per layer")

    def bytes_of(self, n_layers: int) -> list[int]:
        """Bytes of each of ``n_layers`` layers."""
        lb = self.layer_bytes
        if isinstance(lb, int):
            return [lb] * n_layers
        if len(lb) != n_layers:
            raise ValueError(f"layer_bytes has {len(lb)} entries for {n_layers} layers: give "
                             "one per layer or a single int")
        return list(lb)

    def buckets(self, n_layers: int) -> list[tuple[int, int]]:
        """``(ready_layer, bytes)`` of each gradient bucket, in launch order.

        Layers are walked from the last to the first (the order backward produces gradients);
        a bucket closes when it holds ``bucket_bytes``, so a large layer fills several buckets
        and small ones share one; it is ready when the backward of ``ready_layer`` (the lowest
        layer it holds) ends.
        """
        out, cur = [], 0
        for i in reversed(range(n_layers)):
            rem = self.bytes_of(n_layers)[i]
            while rem > 0:
                take = min(rem, self.bucket_bytes - cur)
                cur += take
                rem -= take
                if cur == self.bucket_bytes:
                    out.append((i, cur))
                    cur = 0
        if cur:
            out.append((0, cur))
        return out

    def time(self, op: str, payload_bytes: int) -> float:
        return self.link.time(op, payload_bytes, self.group_size)


@dataclass(frozen=True)
class TPTraffic:
    """Tensor-parallel collectives of ONE layer and ONE microbatch: ``forward`` and
    ``backward`` seconds on ``link`` (e.g. from :func:`tpp.costs.tp.tp_comm_time`).

    ``decomposed=False``: the collectives block the layer (Megatron's default: exposed).
    ``decomposed=True``: collective matmul / async TP (Wang et al. 2023; PyTorch's async-TP,
    TransformerEngine's userbuffers): the layer's matmuls are cut into ``steps`` chunks (the
    TP degree), each chunk's share of the collectives runs during the next chunk's matmul, and
    the last chunk's share cannot hide: when communication is shorter than compute, ``1/steps``
    of it stays exposed (modelled as a reduce-scatter fed chunk by chunk).
    """

    forward: float
    backward: float
    link: Link
    decomposed: bool = False
    steps: int = 2

    def __post_init__(self) -> None:
        _positive("forward", self.forward, allow_zero=True)
        _positive("backward", self.backward, allow_zero=True)
        _int("steps", self.steps, 1)
        if not isinstance(self.link, Link):
            raise ValueError("link must be a tpp.data_parallel.overlap.Link, "
                             "e.g. Link.preset('nvlink4')")

    @classmethod
    def from_shape(cls, b: int, s: int, h: int, tp: int, link: Link, *, sp: bool = True,
                   recompute: str = "none", decomposed: bool = False) -> TPTraffic:
        """Per-layer TP times of a ``b x s x h`` microbatch at degree ``tp``
        (:func:`tpp.costs.tp.tp_comm_time`; ``s`` is the full sequence)."""
        _int("tp", tp, 2)
        f = tp_comm_time(b, s, h, tp, link.bandwidth, link.latency, 1, "forward", sp)
        step = tp_comm_time(b, s, h, tp, link.bandwidth, link.latency, 1, "step", sp,
                            recompute=recompute)
        return cls(f, step - f, link, decomposed, tp)


@dataclass(frozen=True)
class CPTraffic:
    """Context-parallel ring of ONE layer and ONE microbatch: ``forward`` / ``backward``
    seconds on ``link``, in ``steps`` ring steps (CP - 1 for ring attention), hidden behind
    ``share`` of the layer's compute (the attention kernels: each step's KV block arrives while
    the previous block is processed; Liu et al. 2023, Ring Attention). ``overlap=False``: the
    exchange blocks the layer."""

    forward: float
    backward: float
    link: Link
    steps: int = 1
    share: float = 1.0
    overlap: bool = True

    def __post_init__(self) -> None:
        _positive("forward", self.forward, allow_zero=True)
        _positive("backward", self.backward, allow_zero=True)
        _int("steps", self.steps, 1)
        if not isinstance(self.share, Real) or not 0 < self.share <= 1:
            raise ValueError(f"share={self.share!r} must be in (0, 1]: the part of the layer's "
                             "compute the ring hides behind (attention's share)")
        if not isinstance(self.link, Link):
            raise ValueError("link must be a tpp.data_parallel.overlap.Link")

    @classmethod
    def from_kv_bytes(cls, kv_bytes: int, cp: int, link: Link, share: float = 1.0) -> CPTraffic:
        """All-gather of the full sequence's K and V (``kv_bytes``) in the forward, twice that
        in the backward (KV again and their gradients), as the planner counts it."""
        _int("cp", cp, 2)
        f = link.time("all_gather", kv_bytes, cp)
        return cls(f, 2 * f, link, cp - 1, share)


@dataclass(frozen=True)
class PPTraffic:
    """Pipeline p2p of one microbatch: ``send_forward`` (activations to the next stage, after
    the forward) and ``send_backward`` (gradients to the previous stage, after the backward),
    seconds on ``link``. ``overlap=True``: sends are asynchronous (they occupy the link and SMs);
    ``False``: the next compute waits for them."""

    send_forward: float
    send_backward: float
    link: Link
    overlap: bool = True

    def __post_init__(self) -> None:
        _positive("send_forward", self.send_forward, allow_zero=True)
        _positive("send_backward", self.send_backward, allow_zero=True)
        if not isinstance(self.link, Link):
            raise ValueError("link must be a tpp.data_parallel.overlap.Link")
