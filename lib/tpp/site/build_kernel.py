"""The book build's kernels without a 2 s import they do not need (issue 22).

Every chapter glues numbers (``myst_nb.glue``), which imports nbformat, whose validator imports
jsonschema, whose format checkers import ``rfc3987_syntax`` when it is installed (jupyter-events
pulls it in for JupyterLab): that module builds three Earley parsers of the RFC 3987 grammar at
import, about 2 s of CPU in every kernel, for an ``iri`` format check that neither nbformat nor
the chapters run. ``_ext/tpp_execute.py`` starts its kernels with this module as an IPython
extension (``--IPKernelApp.extra_extensions=tpp.site.build_kernel``): it puts a stand-in for
``rfc3987_syntax`` in ``sys.modules`` whose one function, ``is_valid_syntax``, imports the real
module on its first call and hands over to it, so that nothing behaves differently; only the
cost moves to the first ``iri`` check, which never comes. (``_ext/quick_start.py`` spares the
Sphinx process the same import, and ``tpp.grading`` every process that grades.)
"""

from __future__ import annotations

import importlib
import sys
import types

__all__ = ["MODULE", "defer_rfc3987_syntax", "load_ipython_extension"]

MODULE = "rfc3987_syntax"


def _real_is_valid_syntax(term: str, value: str) -> bool:
    """``rfc3987_syntax.is_valid_syntax``, the real one (imported now, once)."""
    if isinstance(sys.modules.get(MODULE), _Deferred):
        del sys.modules[MODULE]
    return importlib.import_module(MODULE).is_valid_syntax(term, value)


class _Deferred(types.ModuleType):
    """The stand-in: ``from rfc3987_syntax import is_valid_syntax`` gets the deferring call."""

    is_valid_syntax = staticmethod(_real_is_valid_syntax)


def defer_rfc3987_syntax() -> bool:
    """Put the stand-in in ``sys.modules`` unless the module is imported already; True if put."""
    if MODULE in sys.modules:
        return False
    sys.modules[MODULE] = _Deferred(MODULE, "stand-in: the real module loads at its first use")
    return True


def load_ipython_extension(ipython) -> None:  # noqa: ARG001 - IPython's extension hook
    defer_rfc3987_syntax()
