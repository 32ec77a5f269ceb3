"""The grader cell that serialises answer values inside the student's kernel.

After the last cell of each question, the grader appends a cell built by
:func:`serialiser_source`. It converts each answer variable to *tagged plain JSON* and writes
one file, created exclusively (``O_EXCL``) under a random name, with raw ``os`` calls:

- ``{"t": "none"}``, ``{"t": "bool", "v": b}``, ``{"t": "int", "v": i}``,
  ``{"t": "float", "v": x}``, ``{"t": "str", "v": s}``, ``{"t": "frac", "n": p, "d": q}``;
- ``{"t": "array", "kind": "b"|"i"|"f", "shape": [...], "v": [flat values]}`` for numpy;
- ``{"t": "list", "v": [...]}`` (lists and tuples), ``{"t": "dict", "v": [[key, value], ...]}``;
- ``{"t": "missing"}`` when the name is undefined, ``{"t": "error", "why": ...}`` otherwise.

Only exact built-in types (``type(v) is float``, not a subclass), numpy arrays and scalars of
bool/int/float dtype, ``fractions.Fraction`` and SymPy numbers are accepted, so an object whose
``__eq__`` always says True is rejected, not compared. The values are decided here, but
correctness is decided by :mod:`tpp.grading.compare` in the grader's process, against the
master's values from a separate kernel: faking a pass would require knowing the reference.
"""

from __future__ import annotations

SIZE_LIMIT = 8_000_000  # bytes of JSON per question
MAX_ITEMS = 1_000_000  # array elements / list items per answer
MAX_DEPTH = 16

_TEMPLATE = r'''
def _tpp_grader_serialise_{nonce}():
    import sys as _sys
    _imp = _sys.modules["importlib"] if "importlib" in _sys.modules else __import__("importlib")
    for _name in [m for m in list(_sys.modules) if m == "json" or m.startswith("json.")]:
        del _sys.modules[_name]
    _json = _imp.import_module("json")
    _os = _imp.import_module("os")
    _ns = _sys._getframe(1).f_globals
    _np = _sys.modules.get("numpy")
    _fr = _sys.modules.get("fractions")
    _count = [0]

    def _enc(v, depth):
        t = type(v)
        _count[0] += 1
        if _count[0] > {max_items} or depth > {max_depth}:
            raise ValueError("answer too large or nested too deeply")
        if v is None:
            return {{"t": "none"}}
        if t is bool:
            return {{"t": "bool", "v": v}}
        if t is int:
            if v.bit_length() > 4096:
                raise ValueError("integer too large")
            return {{"t": "int", "v": v}}
        if t is float:
            return {{"t": "float", "v": v}}
        if t is str:
            if len(v) > 100000:
                raise ValueError("string too long")
            return {{"t": "str", "v": v}}
        if _fr is not None and t is _fr.Fraction:
            return {{"t": "frac", "n": _enc(v.numerator, depth + 1)["v"],
                     "d": _enc(v.denominator, depth + 1)["v"]}}
        if t is list or t is tuple:
            return {{"t": "list", "v": [_enc(x, depth + 1) for x in v]}}
        if t is dict:
            return {{"t": "dict", "v": [[_enc(k, depth + 1), _enc(x, depth + 1)]
                                        for k, x in v.items()]}}
        mod = getattr(t, "__module__", "") or ""
        _isnp = _np is not None and (
            t is _np.ndarray or (mod == "numpy" and isinstance(v, _np.generic)))
        if _isnp:
            a = _np.asarray(v)
            kind = a.dtype.kind
            if kind == "u":
                kind = "i"
            if kind not in "bif":
                raise ValueError("numpy dtype %s is not bool, int or float" % a.dtype)
            if a.size > {max_items}:
                raise ValueError("array too large")
            _count[0] += int(a.size)
            if a.ndim == 0:
                item = a.item()
                return {{"t": {{"b": "bool", "i": "int", "f": "float"}}[kind], "v": item}}
            return {{"t": "array", "kind": kind, "shape": list(a.shape),
                     "v": a.ravel().tolist()}}
        if mod.startswith("sympy"):
            if getattr(v, "is_Integer", False):
                return {{"t": "int", "v": int(v.p)}}
            if getattr(v, "is_Rational", False):
                return {{"t": "frac", "n": int(v.p), "d": int(v.q)}}
            if getattr(v, "is_Float", False):
                return {{"t": "float", "v": float(v)}}
            if getattr(v, "is_Boolean", False) and v in (True, False):
                return {{"t": "bool", "v": bool(v)}}
            raise ValueError("a symbolic expression, not a number: evaluate it")
        raise ValueError("type %s.%s is not a plain value (int, float, str, bool, list, "
                         "dict, Fraction, numpy array)" % (mod, t.__qualname__))

    _out = {{}}
    for _name in {names!r}:
        if _name not in _ns:
            _out[_name] = {{"t": "missing"}}
            continue
        try:
            _count[0] = 0
            _out[_name] = _enc(_ns[_name], 0)
        except Exception as _exc:  # any failure is reported, not raised
            _out[_name] = {{"t": "error", "why": str(type(_exc).__name__) + ": " + str(_exc)[:300]}}
    _data = _json.dumps({{"nonce": {nonce!r}, "question": {question!r}, "values": _out}})
    if len(_data) > {size_limit}:
        _data = _json.dumps({{"nonce": {nonce!r}, "question": {question!r}, "values":
                              {{n: {{"t": "error", "why": "answers too large"}} for n in _out}}}})
    _fd = _os.open({path!r}, _os.O_WRONLY | _os.O_CREAT | _os.O_EXCL, 0o600)
    try:
        _buf = _data.encode("utf-8")
        while _buf:
            _n = _os.write(_fd, _buf)
            if type(_n) is not int or _n <= 0:
                raise OSError("os.write wrote nothing")
            _buf = _buf[_n:]
    finally:
        _os.close(_fd)


_tpp_grader_serialise_{nonce}()
del _tpp_grader_serialise_{nonce}
'''


def serialiser_source(names: list[str], question: str, path: str, nonce: str) -> str:
    """Source of the grader cell writing ``names``' values for ``question`` to ``path``."""
    return _TEMPLATE.format(
        names=list(names),
        question=question,
        path=path,
        nonce=nonce,
        max_items=MAX_ITEMS,
        max_depth=MAX_DEPTH,
        size_limit=SIZE_LIMIT,
    ).strip() + "\n"
