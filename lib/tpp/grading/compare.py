"""Decide correctness in the grader's process: validate serialised answers, compare with reference.

The student's kernel only produces tagged plain JSON (see :mod:`tpp.grading.serialise`); this
module validates its schema strictly (exact types, known tags, bounded size) and compares it with
the master's value under the question's tolerances:

- numbers (int, float, numpy scalars): ``|s - r| <= atol + rtol * |r|`` (exact arithmetic when
  both are ints), so an int reference accepts ``8.0``; NaN equals only NaN;
- ``fractions.Fraction`` references are compared exactly (a float is not accepted);
- booleans compare exactly and are never numbers;
- strings compare case- and whitespace-insensitively;
- arrays (or lists of numbers against an array): same shape, element-wise ``np.isclose``;
- lists element-wise, dicts key by key.

No object from the student's kernel is ever unpickled or evaluated: only ``json.loads`` output.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

MAX_FILE_BYTES = 4_000_000
MAX_DEPTH = 32
MAX_NODES = 100_000
NUMBER_TAGS = ("int", "float", "frac")


class SchemaError(ValueError):
    """The serialised answers do not follow the tagged-JSON schema."""


def _is_int(v: Any) -> bool:
    return type(v) is int


def _is_num(v: Any) -> bool:
    return type(v) in (int, float)


def validate(value: Any, depth: int = 0) -> None:
    """Raise :class:`SchemaError` unless ``value`` is a well-formed tagged value."""
    if depth > 32:
        raise SchemaError("nested too deeply")
    if type(value) is not dict or type(value.get("t")) is not str:
        raise SchemaError("a value must be an object with a string tag 't'")
    t = value["t"]
    keys = set(value)
    if t in ("none", "missing"):
        ok = keys == {"t"}
    elif t == "bool":
        ok = keys == {"t", "v"} and type(value["v"]) is bool
    elif t == "int":
        ok = keys == {"t", "v"} and _is_int(value["v"])
    elif t == "float":
        ok = keys == {"t", "v"} and _is_num(value["v"])
    elif t == "str":
        ok = keys == {"t", "v"} and type(value["v"]) is str
    elif t == "frac":
        ok = keys == {"t", "n", "d"} and _is_int(value["n"]) and _is_int(value["d"])
        ok = ok and value["d"] != 0
    elif t == "error":
        ok = keys == {"t", "why"} and type(value["why"]) is str
    elif t == "array":
        ok = keys == {"t", "kind", "shape", "v"} and value["kind"] in ("b", "i", "f")
        shape, flat = value.get("shape"), value.get("v")
        ok = ok and type(shape) is list and len(shape) <= MAX_DEPTH
        ok = ok and all(_is_int(n) and 0 <= n <= MAX_NODES for n in shape)
        ok = ok and type(flat) is list and len(flat) <= MAX_NODES
        ok = ok and len(flat) == math.prod(shape)
        if ok:
            want = {"b": (bool,), "i": (int,), "f": (int, float)}[value["kind"]]
            ok = all(type(x) in want for x in flat)
    elif t == "list":
        ok = keys == {"t", "v"} and type(value["v"]) is list
        if ok:
            for item in value["v"]:
                validate(item, depth + 1)
    elif t == "dict":
        ok = keys == {"t", "v"} and type(value["v"]) is list
        if ok:
            for pair in value["v"]:
                if type(pair) is not list or len(pair) != 2:
                    raise SchemaError("a dict item must be a [key, value] pair")
                validate(pair[0], depth + 1)
                validate(pair[1], depth + 1)
    else:
        raise SchemaError(f"unknown tag {t[:20]!r}")
    if not ok:
        raise SchemaError(f"malformed {t!r} value")


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if it is a regular file (not a link, FIFO, socket or device) of at
    most ``limit`` bytes; ``OSError`` / :class:`SchemaError` otherwise. Never blocks."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SchemaError("not a regular file")
        if st.st_size > limit:
            raise SchemaError(f"larger than {limit} bytes")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise SchemaError(f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def _max_depth(raw: bytes) -> int:
    """The deepest nesting of JSON arrays/objects in ``raw`` (strings skipped), in linear time."""
    text = _STRING_RE.sub(b'""', raw)
    depth = best = 0
    for b in text.translate(None, _NOT_BRACKETS):
        depth += 1 if b in (0x5B, 0x7B) else -1
        best = max(best, depth)
    return best


_STRING_RE = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def load_record(path: Path, nonce: str, question: str, names: list[str]) -> dict[str, Any]:
    """Read one serialised-answers file and validate it; raise :class:`SchemaError` if bad."""
    raw = read_regular(path, MAX_FILE_BYTES)
    if raw.count(b"{") + raw.count(b"[") > 2 * MAX_NODES:
        raise SchemaError("answers file holds too many values")
    if _max_depth(raw) > MAX_DEPTH + 4:
        raise SchemaError("answers file nested too deeply")
    try:
        record = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise SchemaError(f"answers file is not JSON: {str(exc)[:80]}") from None
    if type(record) is not dict or set(record) != {"nonce", "question", "values"}:
        raise SchemaError("answers record has the wrong keys")
    if record["nonce"] != nonce or record["question"] != question:
        raise SchemaError("answers record is not the one the grader asked for")
    values = record["values"]
    if type(values) is not dict or set(values) != set(names):
        raise SchemaError("answers record does not hold exactly the question's answers")
    for v in values.values():
        validate(v)
    return values


# --- comparison -----------------------------------------------------------------------------


def _exact(v: dict[str, Any]) -> Fraction | None:
    """The exact rational value of an int/frac/float tag (None for NaN/inf)."""
    if v["t"] == "int":
        return Fraction(v["v"])
    if v["t"] == "frac":
        return Fraction(v["n"], v["d"])
    x = v["v"]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return Fraction(x)


def _as_float(v: dict[str, Any]) -> float:
    if v["t"] == "frac":
        return v["n"] / v["d"]
    return float(v["v"])


def _describe(v: dict[str, Any]) -> str:
    t = v["t"]
    return {
        "none": "None",
        "bool": "a bool",
        "int": "an int",
        "float": "a float",
        "frac": "a Fraction",
        "str": "a string",
        "array": "an array",
        "list": "a list",
        "dict": "a dict",
    }.get(t, t)


def _plain(v: dict[str, Any]) -> Any:
    """Nested Python lists of numbers/bools from number, list and array tags."""
    t = v["t"]
    if t in ("int", "float", "bool"):
        return v["v"]
    if t == "list":
        return [_plain(x) for x in v["v"]]
    if t == "array":
        return np.array(v["v"], dtype=object).reshape(v["shape"]).tolist()
    raise TypeError(t)


def _to_array(v: dict[str, Any]) -> np.ndarray | None:
    """An array from an array tag or a (nested) list of numbers/bools; None if not numeric."""
    try:
        a = np.array(_plain(v))
    except (TypeError, ValueError, OverflowError):
        return None
    if a.dtype.kind not in "biuf":
        return None
    return a


def _norm_str(s: str) -> str:
    return " ".join(s.split()).casefold()


def _key(v: dict[str, Any]) -> tuple:
    t = v["t"]
    if t in NUMBER_TAGS:
        return ("num", _exact(v) if _exact(v) is not None else repr(v["v"]))
    if t == "str":
        return ("str", v["v"])
    if t == "bool":
        return ("bool", v["v"])
    if t == "none":
        return ("none",)
    return (t, json.dumps(v, sort_keys=True))


def equal(student: dict[str, Any], ref: dict[str, Any], rtol: float, atol: float) -> tuple[
    bool, str
]:
    """Whether a validated student value matches the reference; a short reason if not.

    The reason never contains the reference value.
    """
    ts, tr = student["t"], ref["t"]
    if ts == "missing":
        return False, "not defined"
    if ts == "error":
        return False, f"could not be read: {safe_why(student['why'])}"
    if tr == "none":
        return (ts == "none"), "" if ts == "none" else f"expected None, got {_describe(student)}"
    if tr == "bool":
        if ts != "bool":
            return False, f"expected a bool, got {_describe(student)}"
        return (student["v"] is ref["v"]), "incorrect value"
    if tr == "str":
        if ts != "str":
            return False, f"expected a string, got {_describe(student)}"
        return _norm_str(student["v"]) == _norm_str(ref["v"]), "incorrect value"
    if tr == "frac":
        if ts not in ("frac", "int"):
            return False, f"expected an exact fractions.Fraction, got {_describe(student)}"
        return _exact(student) == _exact(ref), "incorrect value"
    if tr in ("int", "float"):
        if ts not in NUMBER_TAGS:
            return False, f"expected a number, got {_describe(student)}"
        return _close_scalar(student, ref, rtol, atol), "incorrect value"
    if tr == "array" or (tr == "list" and ts == "array"):
        return _equal_arrays(student, ref, rtol, atol)
    if tr == "list":
        if ts != "list":
            return False, f"expected a list, got {_describe(student)}"
        if len(student["v"]) != len(ref["v"]):
            return False, "the list has the wrong length"
        for k, (s, r) in enumerate(zip(student["v"], ref["v"], strict=True)):
            ok, why = equal(s, r, rtol, atol)
            if not ok:
                return False, f"item {k}: {why}"
        return True, ""
    if tr == "dict":
        if ts != "dict":
            return False, f"expected a dict, got {_describe(student)}"
        smap = {_key(k): v for k, v in student["v"]}
        rmap = {_key(k): v for k, v in ref["v"]}
        if set(smap) != set(rmap):
            return False, "the dict has the wrong keys"
        for k, r in rmap.items():
            ok, why = equal(smap[k], r, rtol, atol)
            if not ok:
                return False, f"key {k[-1]!s:.40}: {why}"
        return True, ""
    return False, f"unsupported reference type {tr}"


def _close_scalar(student: dict[str, Any], ref: dict[str, Any], rtol: float, atol: float) -> bool:
    s, r = _exact(student), _exact(ref)
    if s is not None and r is not None:
        return abs(s - r) <= Fraction(atol) + Fraction(rtol) * abs(r)
    a, b = _as_float(student), _as_float(ref)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b  # infinities


def _equal_arrays(
    student: dict[str, Any], ref: dict[str, Any], rtol: float, atol: float
) -> tuple[bool, str]:
    s, r = _to_array(student), _to_array(ref)
    if s is None:
        return False, f"expected an array of numbers, got {_describe(student)}"
    if r is None:
        return False, "the reference is not an array"
    if s.shape != r.shape:
        return False, f"shape {s.shape} is not the expected shape"
    rbool = ref["t"] == "array" and ref["kind"] == "b"
    if rbool:
        if s.dtype != bool:
            return False, "expected an array of bools"
        return bool(np.array_equal(s, r)), "incorrect values"
    if s.dtype == bool:
        return False, "expected an array of numbers, got bools"
    try:
        sf, rf = s.astype(np.float64), r.astype(np.float64)
    except (OverflowError, ValueError, TypeError):
        return False, "values out of range"
    ok = bool(np.all(np.isclose(sf, rf, rtol=rtol, atol=atol, equal_nan=True)))
    return ok, "" if ok else "incorrect values"


# The serialiser's own messages (tpp.grading.serialise): the only "why" text shown as it is.
_OWN_WHY = (
    "answer too large or nested too deeply", "integer too large", "string too long",
    "array too large", "a symbolic expression, not a number: evaluate it", "answers too large",
)  # fmt: skip
_DTYPE_WHY = re.compile(r"numpy dtype [A-Za-z0-9<>|]{1,16} is not bool, int or float")
_TYPE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def safe_type(name: str) -> str:
    """A short exception or type name fit for feedback: a built-in one as it is, anything
    else (student-controlled: a class's ``__qualname__`` may carry any text) as "an error"."""
    import builtins

    name = str(name)
    if _TYPE_NAME.fullmatch(name) and isinstance(getattr(builtins, name, None), type):
        return name
    if name in ("CheckFailed", "GuardError", "UnpicklingError", "LinAlgError"):
        return name
    return "an exception of the submission's own class"


def safe_why(why: str) -> str:
    """Why an answer could not be serialised, in the grader's own words only: the text comes
    from the student's kernel (an exception message, a class's ``__qualname__`` can carry any
    text, e.g. a hidden cell's source captured by an audit hook), so only the serialiser's
    fixed messages and a built-in exception type name pass."""
    kind, _, msg = str(why).partition(": ")
    plain = "is not a plain value (int, float, str, bool, list, dict, Fraction, numpy array)"
    if (msg in _OWN_WHY or _DTYPE_WHY.fullmatch(msg)
            or re.fullmatch(r"type ([A-Za-z0-9_.]{1,60}|of the submission's own class) "
                            + re.escape(plain), msg)):  # fmt: skip
        return f"{safe_type(kind)}: {msg}"
    return f"{safe_type(kind)} (the value could not be recorded)"

