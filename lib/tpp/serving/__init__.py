"""Serving (chapter 17, part "Serving"): what a trained model costs and risks at inference.

Modules, one idea each:

- :mod:`.decode` — the decode-step cost model of tensor-parallel serving (:func:`decode_step`,
  the seed's scaling curve and crossover bandwidth). Chapter 06 uses it too: the TP cost of a
  decode step is where the tensor-parallelism part meets serving.
- :mod:`.deployment` — prefill vs decode, and TP x PP x DP serving layouts built on
  :func:`decode_step` (the autoregressive pipeline simulated round by round).
- :mod:`.router` — a request router in front of DP replicas and the prefix-cache hit rate.
- :mod:`.sampling` — rank-consistent sampling: a tiny TP language model on the simulated group.
- :mod:`.demo` — ``tpp demo``, the lesson's "run it locally" program.
- :mod:`.inputs` — the rules every serving function applies to its inputs (presets by name,
  positive counts, choices), so that they live in one place.

The decode-step model is the package's front door: ``tpp.serving.decode_step`` (and the names
below) are what the chapters and the site's explorers call.
"""

from tpp.serving.decode import (
    COMPUTE_MODELS,
    DecodeStep,
    best_tp_degree,
    crossover_bandwidth,
    decode_step,
    scaling_curve,
)

__all__ = ["COMPUTE_MODELS", "DecodeStep", "decode_step", "scaling_curve",
           "crossover_bandwidth", "best_tp_degree"]
