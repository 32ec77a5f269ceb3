"""The serving package's input rules, in one place: presets by name, positive ints, choices.

Every serving function accepts a preset's name or the preset itself (``"llama2_70b"`` or a
:class:`tpp.models.ModelConfig`; ``"nvlink4"`` or a :class:`tpp.hardware.Link`; ``"h100_sxm"``
or a :class:`tpp.hardware.GPU`) and rejects a bad count or option with a ``ValueError`` that
says what to pass instead.
"""

from __future__ import annotations

from tpp.hardware import GPU, Link, gpu, link
from tpp.models import ModelConfig, model

__all__ = ["resolve_model", "resolve_link", "resolve_gpu", "check_positive_ints", "check_choice"]


def resolve_model(m: ModelConfig | str) -> ModelConfig:
    """The model preset named ``m`` (:func:`tpp.models.model`), or ``m`` itself."""
    return model(m) if isinstance(m, str) else m


def resolve_link(x: Link | str) -> Link:
    """The link preset named ``x`` (:func:`tpp.hardware.link`), or ``x`` itself."""
    return link(x) if isinstance(x, str) else x


def resolve_gpu(x: GPU | str) -> GPU:
    """The GPU preset named ``x`` (:func:`tpp.hardware.gpu`), or ``x`` itself."""
    return gpu(x) if isinstance(x, str) else x


def check_positive_ints(**values: object) -> None:
    """Raise ``ValueError`` naming the first of ``values`` that is not an int >= 1 (bools are
    not counts)."""
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} must be a positive int")


def check_choice(name: str, value: object, options: tuple[str, ...]) -> None:
    """Raise ``ValueError`` listing ``options`` when ``value`` is not one of them."""
    if value not in options:
        raise ValueError(f"{name}={value!r}: use one of {', '.join(map(repr, options))}")
