"""Every question, in chapter order: the banks of the parts put together."""

from __future__ import annotations

from functools import cache

from . import pipeline, scale_out, serving, tensor
from .question import Question


@cache
def questions() -> tuple[Question, ...]:
    """Every question, page and graded, in chapter order."""
    return tuple([*tensor.questions(), *pipeline.questions(), *scale_out.questions(),
                  *serving.page(), *serving.graded(), *scale_out.engine_questions()])
