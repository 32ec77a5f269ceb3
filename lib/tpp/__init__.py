"""tpp: the simulation library of the course "Tensor & Pipeline Parallelism, derived".

The library is grouped the way the book's parts are (``_toc.yml``; ``tests/test_layout.py``
keeps it so):

=====================================  ===============================================
part of the book                       packages
=====================================  ===============================================
Tensor parallelism (01-06)             :mod:`tpp.collectives`, :mod:`tpp.tensor_parallel`
Pipeline parallelism (07-12)           :mod:`tpp.pipeline`
Data parallelism and composition       :mod:`tpp.data_parallel` (ZeRO; ``.overlap``, the
(13, 13b, 14)                          chapter "Hiding communication"), :mod:`tpp.planner`
Long context and mixture of experts    :mod:`tpp.context_parallel`, :mod:`tpp.expert_parallel`
Serving (17)                           :mod:`tpp.serving`
On a real engine (18)                  :mod:`tpp.distributed`
=====================================  ===============================================

Across the parts: :mod:`tpp.costs` (closed forms, and the field's calculators transcribed
formula for formula), :mod:`tpp.symbolic` (the SymPy derivations), :mod:`tpp.site` (what the
pages compute and ask: explorers, self-checks) and :mod:`tpp.grading` (the instructor's
grader). At the top level stay only what every part shares: :mod:`tpp.hardware` and
:mod:`tpp.models` (the presets, each number with its source) and :mod:`tpp.cli` (the ``tpp``
command, which reaches into grading and serving).

Collectives sit with tensor parallelism because chapter 01 derives them there; every other
part builds on them. Import the modules you need, one idea each::

    from tpp import collectives, tensor_parallel, pipeline, costs
"""

__version__ = "0.1.0"
