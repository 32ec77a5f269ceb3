"""Data parallelism (part "Data parallelism and composition", chapters 13 and 13b).

The part's two chapters, one subpackage or module each:

- :mod:`.zero` (chapter 13) — DP and ZeRO stages 1, 2, 3 (FSDP) on the simulated process group:
  one Adam step with every collective where the systems place it, ledger-counted.
- :mod:`.overlap` (chapter 13b, "Hiding communication behind compute") — the two-stream
  timeline of one training step per rank. It lives here, not beside :mod:`tpp.planner`, because
  the chapter sits in this part and its central traffic is data parallelism's: the bucketed
  gradient all-reduce behind the backward, FSDP's prefetch, the distributed optimizer's
  all-gather; the TP/PP/CP traffic it also models is what a DP rank shares its links with. The
  planner (chapter 14, :mod:`tpp.planner`) builds on it, as the composition chapter builds on
  the parts before it.

Closed forms of the ZeRO volumes and model states: :mod:`tpp.costs.zero`.
"""

from tpp.data_parallel.zero import MLP, Adam, DataParallel, reference_step

__all__ = ["Adam", "MLP", "DataParallel", "reference_step"]
