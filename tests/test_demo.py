"""``tpp demo``: the serving lesson's "run it locally" program."""

import re
import subprocess
import sys

import numpy as np
import pytest
from tpp import serving
from tpp.hardware import GB
from tpp.serving.demo import run_demo


@pytest.fixture(scope="module")
def demo():
    lines = []
    return run_demo(lines.append), lines


def test_sharded_equals_unsharded_at_tp1_to_tp11(demo):
    res, _ = demo
    assert sorted(res.rel_error) == list(range(1, 12))
    assert res.rel_error[1] == 0.0                        # one rank: the same arithmetic
    assert 0 < max(res.rel_error.values()) < 1e-14        # float64 rounding, no more
    assert all(res.ranks_bitwise_equal.values())


def test_gqa_divisibility_is_refused_then_replicated(demo):
    res, lines = demo
    assert "TP=16 must divide n_kv_heads=8" in res.gqa_error
    assert res.gqa_replicated_ok
    assert any(line.strip().startswith("refused: ValueError: TP=16") for line in lines)


def test_table_tp8_wins_on_nvlink_loses_on_ethernet_and_marks_what_does_not_fit(demo):
    res, lines = demo
    text = "\n".join(lines)
    # independent numbers: the lesson's model by hand (weights / HBM + ring all-reduce bytes)
    w = 140e9
    ar = 2 * 80 * (2 * 7 / 8) * 512 * 8192 * 2
    tp1, tp8_eth = w / 3.35e12, w / 8 / 3.35e12 + ar / 25e9
    assert res.step_ms[("Ethernet b=512", 1)] == pytest.approx(tp1 * 1e3)
    assert res.step_ms[("Ethernet b=512", 8)] == pytest.approx(tp8_eth * 1e3)
    assert res.step_ms[("NVLink b=512", 8)] < res.step_ms[("NVLink b=512", 1)]
    assert res.step_ms[("Ethernet b=512", 8)] > res.step_ms[("Ethernet b=512", 1)]
    assert "Ethernet b=512 : TP8 loses against TP1" in text
    assert "NVLink b=16    : TP8 wins against TP1" in text
    # memory first: TP1 (140 GB of weights) does not fit, by 60 GB; TP2..TP8 fit
    assert res.fits == {1: False, 2: True, 4: True, 8: True}
    over = serving.decode_step("llama2_70b", 1, 16, n_params=70e9).overflow_bytes / GB
    assert f"does not fit, by {over:.1f} GB" in text
    assert len(re.findall("does not fit", text)) == 1
    assert "hypothetical" in text


def test_cli_demo_runs_and_exits_zero():
    out = subprocess.run([sys.executable, "-m", "tpp.cli", "demo"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert "TP8 loses against TP1" in out.stdout and "done in" in out.stdout
    seconds = float(re.search(r"done in ([0-9.]+) s", out.stdout).group(1))
    assert np.isfinite(seconds)
