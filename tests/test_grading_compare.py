"""Serialisation (kernel side) and comparison (grader side), without a kernel.

The serialiser cell is executed here with ``exec`` in a fresh namespace, exactly the source the
grader appends to a notebook; the file it writes is read back by ``load_record``.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tpp.grading.compare import SchemaError, equal, load_record, validate
from tpp.grading.serialise import serialiser_source


def roundtrip(tmp_path, **values):
    """Serialise ``values`` as the kernel would and read them back as the grader does."""
    path = tmp_path / f"a-{len(list(tmp_path.iterdir()))}.json"
    ns = dict(values)
    exec(serialiser_source(list(values), "q1", str(path), "n0nce"), ns)
    return load_record(path, "n0nce", "q1", list(values))


def ok(student, ref, rtol=1e-9, atol=0.0):
    return equal(student, ref, rtol, atol)[0]


# --- serialisation -------------------------------------------------------------------------


def test_plain_values_are_tagged(tmp_path):
    rec = roundtrip(
        tmp_path,
        i=3,
        x=0.5,
        s="B",
        b=True,
        f=Fraction(3, 35),
        n=None,
        l=[1, (2.0, "x")],
        d={"a": 1, 8: 2.5},
        a=np.arange(6.0).reshape(2, 3),
        ai=np.array([1, 2], dtype=np.uint8),
        ab=np.array([True, False]),
        np_scalar=np.float32(0.25),
    )
    assert rec["i"] == {"t": "int", "v": 3}
    assert rec["x"] == {"t": "float", "v": 0.5}
    assert rec["s"] == {"t": "str", "v": "B"}
    assert rec["b"] == {"t": "bool", "v": True}
    assert rec["f"] == {"t": "frac", "n": 3, "d": 35}
    assert rec["n"] == {"t": "none"}
    assert rec["l"] == {
        "t": "list",
        "v": [{"t": "int", "v": 1},
              {"t": "list", "v": [{"t": "float", "v": 2.0}, {"t": "str", "v": "x"}]}],
    }  # fmt: skip
    assert rec["d"]["t"] == "dict" and len(rec["d"]["v"]) == 2
    assert rec["a"] == {"t": "array", "kind": "f", "shape": [2, 3], "v": [0, 1, 2, 3, 4, 5]}
    assert rec["ai"] == {"t": "array", "kind": "i", "shape": [2], "v": [1, 2]}
    assert rec["ab"] == {"t": "array", "kind": "b", "shape": [2], "v": [True, False]}
    assert rec["np_scalar"] == {"t": "float", "v": 0.25}


def test_missing_and_non_plain_values_are_reported_not_raised(tmp_path):
    class Liar:
        def __eq__(self, other):
            return True

    class LyingFloat(float):
        def __eq__(self, other):
            return True

    deep: object = 1
    for _ in range(20):
        deep = [deep]
    rec = roundtrip(
        tmp_path,
        liar=Liar(),
        lying_float=LyingFloat(1.0),
        func=len,
        objarr=np.array([Liar()], dtype=object),
        nested=[1, [Liar()]],
        deep=deep,
        big=list(range(1_000_001)),
    )
    for name in rec:
        assert rec[name]["t"] == "error", name
    assert "not a plain value" in rec["liar"]["why"]
    assert "too large" in rec["big"]["why"]
    path = tmp_path / "m.json"
    exec(serialiser_source(["nope"], "q1", str(path), "n"), {})
    assert load_record(path, "n", "q1", ["nope"]) == {"nope": {"t": "missing"}}


def test_sympy_numbers_are_plain_values(tmp_path):
    sp = pytest.importorskip("sympy")
    rec = roundtrip(tmp_path, r=sp.Rational(3, 35), i=sp.Integer(7), x=sp.Float(0.5))
    assert rec == {
        "r": {"t": "frac", "n": 3, "d": 35},
        "i": {"t": "int", "v": 7},
        "x": {"t": "float", "v": 0.5},
    }
    rec = roundtrip(tmp_path, e=sp.Symbol("p") + 1)
    assert rec["e"]["t"] == "error" and "symbolic" in rec["e"]["why"]


def test_serialiser_survives_a_patched_json_module(tmp_path):
    import json as real_json

    saved = real_json.dumps
    real_json.dumps = lambda *a, **k: '{"fake": true}'
    try:
        rec = roundtrip(tmp_path, x=1.5)
    finally:
        real_json.dumps = saved
        import sys

        sys.modules["json"] = real_json
    assert rec == {"x": {"t": "float", "v": 1.5}}


def test_the_file_is_created_exclusively(tmp_path):
    path = tmp_path / "pre.json"
    path.write_text(json.dumps({"nonce": "n", "question": "q1", "values": {"x": {"t": "none"}}}))
    with pytest.raises(FileExistsError):
        exec(serialiser_source(["x"], "q1", str(path), "n"), {"x": 1})


# --- schema validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"t": "int", "v": 1.5},
        {"t": "int", "v": True},
        {"t": "float", "v": "1"},
        {"t": "bool", "v": 1},
        {"t": "frac", "n": 1, "d": 0},
        {"t": "array", "kind": "f", "shape": [2], "v": [1.0]},
        {"t": "array", "kind": "o", "shape": [1], "v": [1]},
        {"t": "list", "v": [{"t": "eval", "v": "__import__('os')"}]},
        {"t": "str", "v": "x", "extra": 1},
        {"t": "dict", "v": [[{"t": "str", "v": "k"}]]},
        ["not", "an", "object"],
    ],
)
def test_malformed_values_are_rejected(bad):
    with pytest.raises(SchemaError):
        validate(bad)


def test_a_record_must_be_the_one_asked_for(tmp_path):
    path = tmp_path / "r.json"
    good = {"nonce": "n", "question": "q1", "values": {"x": {"t": "int", "v": 1}}}
    for record, match in [
        ({**good, "nonce": "other"}, "not the one"),
        ({**good, "question": "q2"}, "not the one"),
        ({**good, "values": {}}, "exactly"),
        ({**good, "values": {"x": {"t": "int", "v": 1}, "y": {"t": "none"}}}, "exactly"),
        ({**good, "extra": 1}, "wrong keys"),
    ]:
        path.write_text(json.dumps(record))
        with pytest.raises(SchemaError, match=match):
            load_record(path, "n", "q1", ["x"])
    path.write_text("{not json")
    with pytest.raises(SchemaError, match="not JSON"):
        load_record(path, "n", "q1", ["x"])


# --- comparison -------------------------------------------------------------------------------


def I(v):  # noqa: E743 - tiny constructors for tagged values
    return {"t": "int", "v": v}


def F(v):
    return {"t": "float", "v": v}


def Q(n, d):
    return {"t": "frac", "n": n, "d": d}


def S(v):
    return {"t": "str", "v": v}


def A(values, shape, kind="f"):
    return {"t": "array", "kind": kind, "shape": shape, "v": values}


def L(*items):
    return {"t": "list", "v": list(items)}


def test_numbers_within_tolerance():
    assert ok(F(1.0 + 1e-10), F(1.0), rtol=1e-9)
    assert not ok(F(1.0 + 1e-8), F(1.0), rtol=1e-9)
    assert ok(F(8.0), I(8), rtol=0)  # an int reference accepts 8.0
    assert ok(I(1_000_000_001), I(10**9), rtol=1e-9)
    assert not ok(I(1_000_000_002), I(10**9), rtol=1e-9)
    assert ok(F(1e-13), F(0.0), rtol=1e-9, atol=1e-12)
    assert not ok(F(1e-13), F(0.0), rtol=1e-9, atol=0)
    assert not ok({"t": "bool", "v": True}, I(1))  # bools are not numbers
    assert not ok(S("8"), I(8))


def test_nan_and_infinity():
    nan, inf = float("nan"), float("inf")
    assert not ok(F(nan), F(1.0))
    assert ok(F(nan), F(nan))
    assert ok(F(inf), F(inf)) and not ok(F(-inf), F(inf)) and not ok(F(inf), F(1e308))


def test_fractions_are_exact():
    assert ok(Q(6, 70), Q(3, 35))
    assert ok(I(2), Q(4, 2))
    ok_, why = equal(F(3 / 35), Q(3, 35), 1e-3, 0)
    assert not ok_ and "Fraction" in why
    assert not ok(Q(3, 36), Q(3, 35), rtol=0.1)  # exact even with a tolerance
    assert ok(Q(1, 3), F(1 / 3))  # a float reference accepts a close fraction


def test_strings_ignore_case_and_whitespace():
    assert ok(S("  Column  then\tROW "), S("column then row"))
    assert not ok(S("row then column"), S("column then row"))


def test_arrays_and_lists():
    ref = A([0.0, 1.0, 2.0, 3.0], [2, 2])
    assert ok(A([0.0, 1.0, 2.0, 3.0 + 1e-12], [2, 2]), ref)
    assert ok(L(L(I(0), I(1)), L(I(2), I(3))), ref)  # nested list against an array
    assert not ok(A([0.0, 1.0, 2.0, 3.0], [4]), ref)  # shape matters
    assert not ok(L(I(0), I(1)), ref)
    assert not ok(A([True, False], [2], "b"), A([1.0, 0.0], [2]))
    assert ok(A([True, False], [2], "b"), A([True, False], [2], "b"))
    assert not ok(L(I(1), L(I(2))), ref)  # ragged
    assert ok(L(F(1.0), S("a")), L(I(1), S("A")))
    assert not ok(L(F(1.0)), L(F(1.0), F(2.0)))


def test_dicts_key_by_key():
    ref = {"t": "dict", "v": [[S("tp"), I(8)], [I(4), F(0.5)]]}
    same = {"t": "dict", "v": [[F(4.0), F(0.5)], [S("tp"), I(8)]]}
    assert ok(same, ref)
    assert not ok({"t": "dict", "v": [[S("tp"), I(8)]]}, ref)
    assert not ok({"t": "dict", "v": [[S("tp"), I(9)], [I(4), F(0.5)]]}, ref)


def test_reasons_never_show_the_reference():
    for student, ref in [(F(2.0), F(3.14159)), (S("b"), S("secret-answer")),
                         (A([1.0], [1]), A([2.71828], [1]))]:  # fmt: skip
        ok_, why = equal(student, ref, 1e-9, 0)
        assert not ok_
        assert "3.14159" not in why and "secret" not in why and "2.71828" not in why


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=-1e300, max_value=1e300), min_size=1, max_size=12),
    st.floats(min_value=1e-12, max_value=1e-3),
)
def test_roundtrip_then_compare_agrees_with_isclose(tmp_path_factory, values, rtol):
    """Serialise random arrays, perturb them, and compare; the verdict equals numpy's isclose."""
    tmp = tmp_path_factory.mktemp("rt")
    ref = np.array(values)
    student = ref * (1 + 2 * rtol)  # just outside the tolerance (unless the value is 0)
    rec = roundtrip(tmp, r=ref, s=student, r2=ref.copy())
    expected = bool(np.all(np.isclose(student, ref, rtol=rtol, atol=0)))
    assert equal(rec["s"], rec["r"], rtol, 0)[0] is expected
    assert equal(rec["r2"], rec["r"], rtol, 0)[0]
    assert all(math.isfinite(x) for x in rec["r"]["v"])
