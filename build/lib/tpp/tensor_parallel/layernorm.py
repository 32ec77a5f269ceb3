"""LayerNorm over the last axis with an explicit backward (Ba et al. 2016).

``y = (x - mu) / sqrt(var + eps) * gamma + beta``, statistics over the last axis. The backward
recomputes ``mu`` and ``var`` from the saved input, so only ``x`` is kept for it (as Korthikanti
et al. 2022 count: "the input to the LayerNorm", 2sbh bytes):

    xhat = (x - mu) * rstd,  dxhat = dy * gamma
    dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    dgamma = sum(dy * xhat), dbeta = sum(dy)   (over every axis but the last)
"""

from __future__ import annotations

import numpy as np

__all__ = ["layernorm_forward", "layernorm_backward"]


def layernorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
                      eps: float = 1e-5) -> np.ndarray:
    """LayerNorm of ``x`` (..., d) with scale ``gamma`` and shift ``beta`` (d,)."""
    x = np.asarray(x, dtype=np.float64)
    if gamma.shape != (x.shape[-1],) or beta.shape != (x.shape[-1],):
        raise ValueError(f"gamma/beta must have shape ({x.shape[-1]},), got {gamma.shape} and "
                         f"{beta.shape}")
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    return (x - mu) * rstd * gamma + beta


def layernorm_backward(x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, eps: float = 1e-5
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Returns ``(dx, dgamma, dbeta)``; gradients of gamma and beta summed over the tokens of
    ``x`` (a sequence shard gives partial sums)."""
    mu = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(-1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    dxhat = dy * gamma
    dx = rstd * (dxhat - dxhat.mean(-1, keepdims=True)
                 - xhat * (dxhat * xhat).mean(-1, keepdims=True))
    d = x.shape[-1]
    dgamma = (dy * xhat).reshape(-1, d).sum(0)
    dbeta = dy.reshape(-1, d).sum(0)
    return dx, dgamma, dbeta
