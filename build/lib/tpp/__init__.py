"""tpp: the simulation library of the course "Tensor & Pipeline Parallelism, derived".

Import the modules you need, one idea each::

    from tpp import collectives, tensor_parallel, pipeline, costs
"""

__version__ = "0.1.0"
