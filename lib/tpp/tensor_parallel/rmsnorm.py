"""RMSNorm over the last axis with an explicit backward (Zhang & Sennrich 2019, eq. 4).

``y = x / rms(x) * gamma`` with ``rms(x) = sqrt(mean(x^2) + eps)``: LayerNorm without the mean
and the shift, as Llama uses it. The backward recomputes ``rms`` from the saved input, so only
``x`` is kept (2sbh bytes, as for LayerNorm)::

    xhat = x * r,  r = 1 / rms(x),  dxhat = dy * gamma
    dx = r * (dxhat - xhat * mean(dxhat * xhat)),   dgamma = sum(dy * xhat)
"""

from __future__ import annotations

import numpy as np

__all__ = ["rmsnorm_forward", "rmsnorm_backward"]


def rmsnorm_forward(x: np.ndarray, gamma: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """RMSNorm of ``x`` (..., d) with scale ``gamma`` (d,)."""
    x = np.asarray(x, dtype=np.float64)
    if gamma.shape != (x.shape[-1],):
        raise ValueError(f"gamma must have shape ({x.shape[-1]},), got {gamma.shape}")
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * gamma


def rmsnorm_backward(x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, eps: float = 1e-5
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Returns ``(dx, dgamma)``; ``dgamma`` summed over the tokens of ``x`` (a sequence shard
    gives a partial sum)."""
    r = 1.0 / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    xhat = x * r
    dxhat = dy * gamma
    dx = r * (dxhat - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    dgamma = (dy * xhat).reshape(-1, x.shape[-1]).sum(0)
    return dx, dgamma
