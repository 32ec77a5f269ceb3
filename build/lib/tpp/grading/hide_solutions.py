"""Sphinx extension: ``TPP_HIDE_SOLUTIONS=1 make book`` builds the site without the solutions of
graded exercises.

An exercise is *graded* when its text links a notebook of ``exercises/`` (the graded
assignment, ``{download}`exercises/ex07_bubble.ipynb <…>```). With ``TPP_HIDE_SOLUTIONS=1``
in the environment (config value ``tpp_hide_graded_solutions``), every ``{solution}`` of such
an exercise is dropped from the build, so the published site does not give away the graded
answers; the default self-study site keeps them. The option is an ``env`` config value, so
switching it re-reads every page (no stale cached page keeps a solution).
"""

from __future__ import annotations

import os
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.config import Config

ENV = "TPP_HIDE_SOLUTIONS"


def is_graded(exercise: nodes.Node) -> bool:
    """True if the exercise's text links a notebook of ``exercises/``."""
    for ref in exercise.findall(nodes.Element):
        target = str(ref.get("reftarget", "")) + " " + str(ref.get("refuri", ""))
        if "exercises/" in target and ".ipynb" in target:
            return True
    return False


def _from_env(app: Sphinx, config: Config) -> None:
    if os.environ.get(ENV, "") not in ("", "0"):
        config.tpp_hide_graded_solutions = True


def setup(app: Sphinx) -> dict[str, Any]:
    from sphinx_exercise.directive import SolutionDirective

    class GradedSolutionDirective(SolutionDirective):
        """``{solution}``, dropped when its exercise is graded and hiding is on."""

        def run(self) -> list[nodes.Node]:
            if self.env.app.config.tpp_hide_graded_solutions:
                registry = getattr(self.env, "sphinx_exercise_registry", {})
                entry = registry.get(self.arguments[0]) if self.arguments else None
                if entry is not None and is_graded(entry["node"]):
                    return []
            return super().run()

    app.setup_extension("sphinx_exercise")
    app.add_config_value("tpp_hide_graded_solutions", False, "env")
    app.connect("config-inited", _from_env)
    app.add_directive("solution", GradedSolutionDirective, override=True)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
