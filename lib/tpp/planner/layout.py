"""A parallel layout TP x CP x DP x PP, its rank map, and where layers go on the stages.

Rank order (Megatron-LM's default ``tp-cp-ep-dp-pp``, TP fastest)::

    rank = tp + TP * (cp + CP * (dp + DP * pp))

so the ``TP`` ranks of one tensor-parallel group are consecutive and sit on one node when
``TP <= gpus_per_node``; pipeline stages are the slowest-varying coordinate, furthest apart.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["AXES", "RECOMPUTE", "Layout", "layers_per_chunk", "chunk_rank", "max_chunks"]

AXES = ("tp", "cp", "dp", "pp")
RECOMPUTE = ("none", "selective", "full")


def _pos(name: str, v: int, hint: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}={v!r} must be an int >= 1: {hint}")


@dataclass(frozen=True)
class Layout:
    """Degrees of tensor (``tp``), pipeline (``pp``), data (``dp``) and context (``cp``)
    parallelism; ``virtual`` model chunks per pipeline rank (interleaved 1F1B when > 1);
    ``microbatch_size`` sequences per microbatch; ZeRO stage ``zero`` over the DP x CP group;
    activation ``recompute`` "none", "selective" or "full" (Korthikanti et al. 2022);
    ``sp`` sequence parallelism when TP > 1; ``hsdp`` ZeRO-3 within a node, replicas across
    nodes (hybrid sharding)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    virtual: int = 1
    microbatch_size: int = 1
    zero: int = 0
    recompute: str = "none"
    #: sequence parallelism in the TP group (Korthikanti et al. 2022); ignored when tp == 1
    sp: bool = True
    #: HSDP (PyTorch FSDP2 / torchtitan): ZeRO-3 sharded within a node, replicated across
    hsdp: bool = False

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp"):
            _pos(name, getattr(self, name), "a parallel degree counts GPUs")
        _pos("virtual", self.virtual, "v = 1 means no interleaving")
        _pos("microbatch_size", self.microbatch_size, "a microbatch holds >= 1 sequence")
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise ValueError(f"zero={self.zero!r}: use ZeRO stage 0, 1, 2 or 3")
        if self.recompute not in RECOMPUTE:
            raise ValueError(f"recompute={self.recompute!r}: use one of {', '.join(RECOMPUTE)}")
        if not isinstance(self.sp, bool) or not isinstance(self.hsdp, bool):
            raise ValueError("sp and hsdp are True or False")
        if self.hsdp and self.zero != 3:
            raise ValueError(f"hsdp=True shards parameters within a node (ZeRO-3) and "
                             f"replicates across nodes: set zero=3 (got zero={self.zero})")
        if self.virtual > 1 and self.pp == 1:
            raise ValueError(f"virtual={self.virtual} needs a pipeline: set pp >= 2 or virtual=1")

    @property
    def gpus(self) -> int:
        """tp * pp * dp * cp."""
        return self.tp * self.pp * self.dp * self.cp

    def degree(self, axis: str) -> int:
        if axis not in AXES:
            raise ValueError(f"axis={axis!r}: use one of {', '.join(AXES)}")
        return getattr(self, axis)

    def coords(self, rank: int) -> dict[str, int]:
        """``{"tp": .., "cp": .., "dp": .., "pp": ..}`` of ``rank`` (TP fastest)."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.gpus:
            raise ValueError(f"rank={rank!r} is not in 0..{self.gpus - 1}")
        out = {}
        for axis in AXES:
            out[axis], rank = rank % self.degree(axis), rank // self.degree(axis)
        return out

    def rank(self, tp: int = 0, cp: int = 0, dp: int = 0, pp: int = 0) -> int:
        """The global rank at these coordinates (inverse of :meth:`coords`)."""
        r = 0
        for axis, c in reversed(list(zip(AXES, (tp, cp, dp, pp), strict=True))):
            if not 0 <= c < self.degree(axis):
                raise ValueError(f"{axis}={c} is not in 0..{self.degree(axis) - 1}")
            r = r * self.degree(axis) + c
        return r

    def group(self, axis: str, rank: int) -> list[int]:
        """The ranks of ``rank``'s group along ``axis`` (same other coordinates): evenly
        spaced by :meth:`stride`, from the rank whose ``axis`` coordinate is 0."""
        st = self.stride(axis)
        first = rank - self.coords(rank)[axis] * st
        return [first + k * st for k in range(self.degree(axis))]

    def stride(self, axis: str) -> int:
        """Rank distance between neighbours along ``axis`` (product of the faster degrees)."""
        out = 1
        for a in AXES[: AXES.index(axis)]:
            out *= self.degree(a)
        return out

    def nodes_spanned(self, axis: str, gpus_per_node: int = 8) -> int:
        """Nodes one group along ``axis`` spans (the group of rank 0; all are alike)."""
        _pos("gpus_per_node", gpus_per_node, "GPUs per server, e.g. 8")
        st = self.stride(axis)
        return len({k * st // gpus_per_node for k in range(self.degree(axis))})

    def __str__(self) -> str:
        v = f" v={self.virtual}" if self.virtual > 1 else ""
        z = "HSDP" if self.hsdp else f"ZeRO-{self.zero}"
        sp = " no-SP" if self.tp > 1 and not self.sp else ""
        return (f"TP{self.tp} CP{self.cp} PP{self.pp} DP{self.dp}{v} b={self.microbatch_size}"
                f" {z} recompute={self.recompute}{sp}")


def max_chunks(n_layers: int) -> int:
    """The most model chunks (PP x v) ``n_layers`` layers can be cut into: ``n_layers + 2``.

    The embedding and the LM head each count as one slot when the split is uneven (see
    :func:`layers_per_chunk`), so a chunk may hold the embedding alone or the head alone.
    Llama 3 405B did exactly that: "the first model chunk on the first stage has only the
    embedding, and the last model chunk on the last stage has only output projection and
    loss calculation" (Dubey et al. 2024, arXiv:2407.21783, Sec. 3.3.2), i.e. 126 + 2 = 128
    one-slot chunks. Megatron-LM allows the same with ``account_for_embedding_in_pipeline_split``
    and ``account_for_loss_in_pipeline_split`` (``megatron/core/transformer/transformer_block.py``
    asserts only ``num_layers_to_build >= 0`` for those chunks; NVIDIA/Megatron-LM @
    d98e8a64ddf34856e74b24714e3bedb2f5a39553).
    """
    _pos("n_layers", n_layers, "a model has >= 1 layer")
    return n_layers + 2


def layers_per_chunk(n_layers: int, chunks: int) -> list[int]:
    """Transformer layers on each of ``chunks`` = PP x v model chunks, in model order.

    * ``chunks | n_layers``: ``n_layers / chunks`` each (Narayanan et al. 2021); the embedding
      rides on the first chunk and the LM head on the last.
    * otherwise the embedding and the LM head count as one layer each (Dubey et al. 2024,
      Sec. 3.3.2: Llama 3 405B puts one layer fewer on the first and the last stage) and the
      ``n_layers + 2`` slots are spread as evenly as possible, the leftovers going to the middle
      chunks; the first and last chunks then give one slot to the embedding / head, and may
      hold no layer at all (at most :func:`max_chunks` chunks).
    """
    _pos("n_layers", n_layers, "a model has >= 1 layer")
    _pos("chunks", chunks, "PP x v >= 1")
    if chunks > max_chunks(n_layers):
        raise ValueError(f"{chunks} pipeline chunks (PP x v) for {n_layers} layers: use at most "
                         f"{max_chunks(n_layers)} chunks, the layers plus the embedding and the "
                         "LM head (lower PP or v)")
    if n_layers % chunks == 0:
        return [n_layers // chunks] * chunks
    q, rem = divmod(n_layers + 2, chunks)
    slots = [q] * chunks
    middle = sorted(range(1, chunks - 1), key=lambda c: abs(c - (chunks - 1) / 2))
    for c in (middle + [0, chunks - 1])[:rem]:  # leftovers: centre first, ends last
        slots[c] += 1
    slots[0] -= 1  # the embedding takes one slot of the first chunk
    slots[-1] -= 1  # the LM head one slot of the last
    return slots


def chunk_rank(chunk: int, pp: int) -> int:
    """Pipeline rank of model chunk ``chunk``: ``chunk mod PP`` (Narayanan et al. 2021)."""
    return chunk % pp
