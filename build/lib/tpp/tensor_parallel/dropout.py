"""Dropout with deterministic masks, identical whatever the layout (unsharded, TP, TP+SP).

A mask is drawn for the FULL tensor from ``numpy.random.default_rng([seed, layer, site])`` and
each rank takes its slice (its heads, or its sequence shard), so the sharded and unsharded
computations drop exactly the same elements. ``y = x * m / (1 - p)`` with ``m`` in {0, 1}
(inverted dropout); the backward is ``dx = dy * m / (1 - p)``. A mask is stored as 1 byte per
element, as Korthikanti et al. 2022 count it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SITES", "dropout_mask", "dropout_forward", "dropout_backward"]

#: The dropout sites of a transformer layer (Korthikanti et al. 2022, Sec. 4.1).
SITES = {"softmax": 0, "attention": 1, "mlp": 2}


def _check_p(p: float) -> float:
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability p={p} must be in [0, 1)")
    return float(p)


def dropout_mask(shape: tuple[int, ...], p: float, seed: int, site: str,
                 layer: int = 0) -> np.ndarray:
    """Keep-mask (uint8, 1 = keep) of the full tensor for dropout ``site`` of ``layer``."""
    p = _check_p(p)
    if site not in SITES:
        raise ValueError(f"unknown dropout site {site!r}: use one of {', '.join(SITES)}")
    rng = np.random.default_rng([int(seed), int(layer), SITES[site]])
    return (rng.random(shape) >= p).astype(np.uint8)


def dropout_forward(x: np.ndarray, mask: np.ndarray, p: float) -> np.ndarray:
    """``x * mask / (1 - p)``."""
    return x * mask / (1.0 - _check_p(p))


def dropout_backward(dy: np.ndarray, mask: np.ndarray, p: float) -> np.ndarray:
    """``dy * mask / (1 - p)``."""
    return dy * mask / (1.0 - _check_p(p))
