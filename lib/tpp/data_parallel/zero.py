"""Data parallelism and ZeRO stages 1, 2 and 3 (FSDP) on the simulated process group.

``N`` ranks each hold a replica (or a shard) of a small MLP and ``1/N`` of the global batch. One
optimizer step (Adam, float64) places every collective where the systems place it:

* stage 0 (DP, Li et al. 2020): backward on every microbatch, then one all-reduce of each
  layer's gradient; every rank runs the same full Adam update;
* stage 1 (ZeRO P_os, Rajbhandari et al. 2020, Sec. 5.1): full gradients are accumulated, then
  reduce-scattered; each rank updates its shard of the optimizer states and master weights, and
  an all-gather rebuilds the full weights;
* stage 2 (P_os+g): a rank keeps only its gradient shard, so each microbatch's gradient is
  reduce-scattered as soon as backward produces it; update and all-gather as in stage 1;
* stage 3 (P_os+g+p, FSDP, Zhao et al. 2023): weights stay sharded; each layer's weights are
  all-gathered before its forward and again before its backward (then freed), and its gradient
  is reduce-scattered right after the backward.

The unit of sharding is one layer (FSDP's "unit"): its weight matrix and bias flattened into one
buffer, padded to a multiple of ``N`` (:func:`tpp.costs.zero.shard_elements`). The optimizer state
is the mixed-precision layout of the ZeRO paper (master weights, momentum, variance) held in
float64, so ``K = 3 x 8 = 24`` bytes per parameter. :meth:`DataParallel.state_bytes` counts the
arrays a rank holds; the tests assert it equals :func:`tpp.costs.zero.model_state_terms` and the
ledger equals :func:`tpp.costs.zero.dp_bytes_per_rank`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpp.collectives import ProcessGroup
from tpp.costs.zero import STAGES, shard_elements

__all__ = ["Adam", "MLP", "DataParallel", "reference_step"]


@dataclass(frozen=True)
class Adam:
    """Adam (Kingma & Ba 2015, Algorithm 1) with bias correction; element-wise, so a shard's
    update is exactly the same slice of the full update."""

    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def update(self, w: np.ndarray, m: np.ndarray, v: np.ndarray, g: np.ndarray,
               step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """New ``(w, m, v)`` after step number ``step`` (1-based) with gradient ``g``."""
        m = self.beta1 * m + (1 - self.beta1) * g
        v = self.beta2 * v + (1 - self.beta2) * g * g
        m_hat = m / (1 - self.beta1**step)
        v_hat = v / (1 - self.beta2**step)
        return w - self.lr * m_hat / (np.sqrt(v_hat) + self.eps), m, v


class MLP:
    """``y = W_L tanh(... tanh(x W_1 + b_1) ...) + b_L``; loss ``sum ||y - t||^2 / (2 B)``.

    Layer ``l`` is one flat buffer ``[W_l.ravel(), b_l]`` (``sizes[l] * sizes[l+1] +
    sizes[l+1]`` elements).
    """

    def __init__(self, sizes: list[int], seed: int = 0) -> None:
        if len(sizes) < 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < 1
                                 for s in sizes):
            raise ValueError(f"sizes={sizes!r}: give >= 2 positive int widths, e.g. [4, 8, 2]")
        self.sizes = list(sizes)
        rng = np.random.default_rng(seed)
        self.init_units = [
            np.concatenate([rng.normal(0, 1 / np.sqrt(a), a * b), rng.normal(0, 0.1, b)])
            for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        ]

    @property
    def n_layers(self) -> int:
        return len(self.sizes) - 1

    def unit_params(self) -> list[int]:
        """Parameters of each layer (each FSDP unit)."""
        return [u.size for u in self.init_units]

    def _wb(self, l: int, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.sizes[l], self.sizes[l + 1]
        return flat[: a * b].reshape(a, b), flat[a * b: a * b + b]

    def layer_forward(self, l: int, flat: np.ndarray, x: np.ndarray) -> np.ndarray:
        w, b = self._wb(l, flat)
        z = x @ w + b
        return z if l == self.n_layers - 1 else np.tanh(z)

    def layer_backward(self, l: int, flat: np.ndarray, x: np.ndarray, out: np.ndarray,
                       d_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(d_x, d_flat)`` of layer ``l`` given its input ``x``, output and output gradient."""
        w, _ = self._wb(l, flat)
        dz = d_out if l == self.n_layers - 1 else d_out * (1 - out * out)
        return dz @ w.T, np.concatenate([(x.T @ dz).ravel(), dz.sum(axis=0)])

    def loss_grad(self, out: np.ndarray, target: np.ndarray, global_batch: int) -> np.ndarray:
        """d loss / d out for this rank's rows, scaled by the GLOBAL batch size."""
        return (out - target) / global_batch


def _check_batch(x: np.ndarray, y: np.ndarray, mlp: MLP, parts: int) -> None:
    if x.ndim != 2 or x.shape[1] != mlp.sizes[0] or y.shape != (x.shape[0], mlp.sizes[-1]):
        raise ValueError(f"x must be (B, {mlp.sizes[0]}) and y (B, {mlp.sizes[-1]}); got "
                         f"{x.shape} and {y.shape}")
    if x.shape[0] % parts:
        raise ValueError(f"batch of {x.shape[0]} rows does not split into dp x microbatches = "
                         f"{parts} equal parts: use a batch that is a multiple of {parts}")


def reference_step(mlp: MLP, units: list[np.ndarray], opt: list, x: np.ndarray,
                   y: np.ndarray, adam: Adam, step: int) -> tuple[list, list]:
    """One device, full batch: gradient of the mean loss, then Adam. Returns new units, opt."""
    acts = [x]
    for l, u in enumerate(units):
        acts.append(mlp.layer_forward(l, u, acts[-1]))
    d = mlp.loss_grad(acts[-1], y, x.shape[0])
    grads = [None] * len(units)
    for l in reversed(range(len(units))):
        d, grads[l] = mlp.layer_backward(l, units[l], acts[l], acts[l + 1], d)
    new_units, new_opt = [], []
    for u, (m, v), g in zip(units, opt, grads, strict=True):
        w, m, v = adam.update(u, m, v, g, step)
        new_units.append(w)
        new_opt.append((m, v))
    return new_units, new_opt


class DataParallel:
    """``dp`` simulated ranks training :class:`MLP` with ZeRO ``stage`` (0-3), Adam in float64.

    ``microbatches``: gradient-accumulation steps per optimizer step (each rank splits its
    ``B / dp`` rows into that many microbatches). Collectives go through :attr:`group`, whose
    ledger records every byte; tags name the step (``"zero3.all_gather.forward"``...).
    """

    def __init__(self, mlp: MLP, dp: int, stage: int, adam: Adam | None = None,
                 microbatches: int = 1) -> None:
        if isinstance(stage, bool) or stage not in STAGES:
            raise ValueError(f"ZeRO stage={stage!r}: use 0, 1, 2 or 3")
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) \
                or microbatches < 1:
            raise ValueError(f"microbatches={microbatches!r} must be an int >= 1")
        self.group = ProcessGroup(dp, name="dp")  # validates dp
        self.mlp, self.dp, self.stage = mlp, dp, stage
        self.adam = adam or Adam()
        self.microbatches = microbatches
        self.step_count = 0
        self.sizes = mlp.unit_params()
        self.shard = [shard_elements(n, dp) for n in self.sizes]
        n_r = range(dp)
        full = [u.copy() for u in mlp.init_units]
        pads = [self._pad(u, i) for i, u in enumerate(full)]
        # weights: full replicas (stages 0-2) or shards (stage 3)
        self.weights = [[u.copy() for u in full] if stage < 3 else
                        [self._slice(p, i, r) for i, p in enumerate(pads)] for r in n_r]
        # gradient buffers: full (stages 0-1) or shards (2-3)
        self.grads = [[np.zeros(n if stage < 2 else self.shard[i]) for i, n in
                       enumerate(self.sizes)] for _ in n_r]
        # optimizer states (master weights, momentum, variance): full (stage 0) or shards
        self.opt = [[tuple(x.copy() for x in
                           ((full[i] if stage == 0 else self._slice(pads[i], i, r)),
                            np.zeros(n if stage == 0 else self.shard[i]),
                            np.zeros(n if stage == 0 else self.shard[i])))
                     for i, n in enumerate(self.sizes)] for r in n_r]

    # -- helpers --------------------------------------------------------------------------------
    def _pad(self, a: np.ndarray, i: int) -> np.ndarray:
        return np.concatenate([a, np.zeros(self.shard[i] * self.dp - a.size)])

    def _slice(self, padded: np.ndarray, i: int, r: int) -> np.ndarray:
        return padded[r * self.shard[i]:(r + 1) * self.shard[i]].copy()

    def _gather(self, i: int, when: str) -> list[np.ndarray]:
        out = self.group.all_gather([self.weights[r][i] for r in range(self.dp)],
                                    tag=f"zero{self.stage}.all_gather.{when}")
        return [o[: self.sizes[i]] for o in out]

    def _reduce_scatter(self, i: int, full_grads: list[np.ndarray]) -> list[np.ndarray]:
        return self.group.reduce_scatter([self._pad(g, i) for g in full_grads],
                                         tag=f"zero{self.stage}.reduce_scatter.grad")

    # -- the step -------------------------------------------------------------------------------
    def step(self, x: np.ndarray, y: np.ndarray) -> None:
        """One optimizer step on the global batch ``(x, y)`` (rank r takes the r-th block)."""
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        n, m = self.dp, self.microbatches
        _check_batch(x, y, self.mlp, n * m)
        rows = x.shape[0] // (n * m)
        L = self.mlp.n_layers
        for k in range(m):
            blk = [slice((r * m + k) * rows, (r * m + k + 1) * rows) for r in range(n)]
            acts = [[x[b]] for b in blk]
            for l in range(L):  # forward, layer by layer on every rank
                w = self._gather(l, "forward") if self.stage == 3 else \
                    [self.weights[r][l] for r in range(n)]
                for r in range(n):
                    acts[r].append(self.mlp.layer_forward(l, w[r], acts[r][-1]))
            d = [self.mlp.loss_grad(acts[r][-1], y[blk[r]], x.shape[0]) for r in range(n)]
            for l in reversed(range(L)):  # backward
                w = self._gather(l, "backward") if self.stage == 3 else \
                    [self.weights[r][l] for r in range(n)]
                g = [None] * n
                for r in range(n):
                    d[r], g[r] = self.mlp.layer_backward(l, w[r], acts[r][l], acts[r][l + 1],
                                                         d[r])
                if self.stage >= 2:  # only a shard is kept: reduce-scatter now
                    g = self._reduce_scatter(l, g)
                for r in range(n):
                    self.grads[r][l] += g[r]
        self._update()

    def _update(self) -> None:
        n = self.dp
        self.step_count += 1
        for i in range(len(self.sizes)):
            gr = [self.grads[r][i] for r in range(n)]
            if self.stage == 0:
                gr = [a[: self.sizes[i]] for a in self.group.all_reduce(
                    [self._pad(a, i) for a in gr], tag="dp.all_reduce.grad")]
            elif self.stage == 1:
                gr = self._reduce_scatter(i, gr)
            new = []
            for r in range(n):
                w, mo, v = self.adam.update(*self.opt[r][i], gr[r], self.step_count)
                self.opt[r][i] = (w, mo, v)
                new.append(w.copy())
            if self.stage in (1, 2):  # rebuild the full weights from the updated shards
                self.weights_from_shards(i, new)
            else:
                for r in range(n):
                    self.weights[r][i] = new[r]
            for r in range(n):
                self.grads[r][i][:] = 0.0

    def weights_from_shards(self, i: int, shards: list[np.ndarray]) -> None:
        out = self.group.all_gather(shards, tag=f"zero{self.stage}.all_gather.weights")
        for r in range(self.dp):
            self.weights[r][i] = out[r][: self.sizes[i]]

    # -- inspection -----------------------------------------------------------------------------
    def full_weights(self, rank: int = 0) -> list[np.ndarray]:
        """The full weights as rank ``rank`` sees them (shards concatenated, padding dropped;
        read from the arrays, no collective recorded)."""
        if self.stage < 3:
            return [w.copy() for w in self.weights[rank]]
        return [np.concatenate([self.weights[r][i] for r in range(self.dp)])[: n]
                for i, n in enumerate(self.sizes)]

    def state_bytes(self, rank: int = 0) -> dict[str, int]:
        """Bytes of the arrays rank ``rank`` keeps between steps: ``weights``, ``gradients``,
        ``optimizer_states`` (master weights + momentum + variance)."""
        return {
            "weights": sum(a.nbytes for a in self.weights[rank]),
            "gradients": sum(a.nbytes for a in self.grads[rank]),
            "optimizer_states": sum(a.nbytes for t in self.opt[rank] for a in t),
        }
