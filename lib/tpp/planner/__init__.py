"""The planner: evaluate a TP x CP x PP x DP layout of a model on a cluster, or search them all.

>>> from tpp import models, planner
>>> lay = planner.Layout(tp=8, pp=16, dp=128, recompute="full")
>>> lay.gpus, lay.coords(9)
(16384, {'tp': 1, 'cp': 0, 'dp': 1, 'pp': 0})
"""

from tpp.planner.compare import Comparison, compare_published, error_summary, evaluate_published
from tpp.planner.estimate import Estimate, default_inter_link, evaluate
from tpp.planner.layout import AXES, RECOMPUTE, Layout, chunk_rank, layers_per_chunk, max_chunks
from tpp.planner.published import HOLDOUT, PUBLISHED, Published, published
from tpp.planner.search import candidate_layouts, plan

__all__ = [
    "AXES", "HOLDOUT", "PUBLISHED", "RECOMPUTE", "Comparison", "Estimate", "compare_published",
    "error_summary", "evaluate_published", "Layout", "Published", "candidate_layouts",
    "chunk_rank", "max_chunks", "default_inter_link", "evaluate", "layers_per_chunk", "plan",
    "published",
]
