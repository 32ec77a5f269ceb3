"""The hidden checks of ex15 and ex16 tell right from plausible-but-wrong answers.

A merge that forgets to rescale, or rescales to another shift, must lose question 1 of ex15 on
the hidden random blocks even though it may look right on easy inputs; a correct merge written
differently from the master must win it. The same for ex16's tokens per rank.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tpp.grading.assign import exercise_text
from tpp.grading.grade import GradeOptions, grade_folder
from tpp.grading.notebook import parse_master

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

EX15 = {
    # adds the two partials as if they had the same shift
    "no_rescale": "def merge(m_a, l_a, acc_a, m_b, l_b, acc_b):\n"
    "    return np.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b\n",
    # exact output, but the state is shifted by the minimum: m and l are not what was asked
    "min_shift": "def merge(m_a, l_a, acc_a, m_b, l_b, acc_b):\n"
    "    m = np.minimum(m_a, m_b)\n"
    "    sa, sb = np.exp(m_a - m), np.exp(m_b - m)\n"
    "    return m, sa * l_a + sb * l_b, sa[..., None] * acc_a + sb[..., None] * acc_b\n",
    # correct, written with log-sum-exp weights instead of the master's form
    "honest_lse": "def merge(m_a, l_a, acc_a, m_b, l_b, acc_b):\n"
    "    m = np.fmax(m_a, m_b)\n"
    "    wa = np.exp(m_a - m)\n"
    "    wb = np.exp(m_b - m)\n"
    "    l = wa * l_a + wb * l_b\n"
    "    acc = np.einsum('qh,qhd->qhd', wa, acc_a) + np.einsum('qh,qhd->qhd', wb, acc_b)\n"
    "    return m, l, acc\n",
}

EX16 = {
    # counts the rows by the rank that SENDS them (token blocks), not by the expert's rank
    "by_source": "def tokens_per_rank(experts, ep, n_experts):\n"
    "    t = len(experts)\n"
    "    return [int(np.size(experts[r * t // ep:(r + 1) * t // ep])) for r in range(ep)]\n",
    # counts tokens instead of (token, expert) rows
    "tokens_not_rows": "def tokens_per_rank(experts, ep, n_experts):\n"
    "    per = n_experts // ep\n"
    "    return [int(np.any(experts // per == r, axis=1).sum()) for r in range(ep)]\n",
    "honest_bincount": "def tokens_per_rank(experts, ep, n_experts):\n"
    "    counts = np.bincount(np.ravel(experts), minlength=n_experts)\n"
    "    return counts.reshape(ep, -1).sum(axis=1).tolist()\n",
}


def _grade(tmp_path, name: str, answers: dict[str, str]) -> dict:
    master = parse_master(REPO / "solutions" / f"{name}.ipynb")
    blank = json.loads(exercise_text(master))
    subs = tmp_path / master.assignment
    subs.mkdir()
    for student, source in answers.items():
        nb = json.loads(json.dumps(blank))
        for cell in nb["cells"]:
            meta = cell.get("metadata", {})
            if "answer" in meta.get("tags", []) and meta.get("tpp", {}).get("question") == "q1":
                cell["source"] = source
        (subs / f"{student}.ipynb").write_text(json.dumps(nb))
    summary = grade_folder(
        subs, tmp_path / "out", solutions=REPO / "solutions", options=GradeOptions(timeout=60)
    )
    return {r["student"]: r["questions"]["q1"] for r in summary.rows}


def test_ex15_hidden_blocks_need_the_rescaled_max_shift(tmp_path):
    q1 = _grade(tmp_path, "ex15_online_softmax", EX15)
    assert (q1["no_rescale"]["points"], q1["no_rescale"]["result"]) == (0, "incorrect")
    assert (q1["min_shift"]["points"], q1["min_shift"]["result"]) == (0, "incorrect")
    assert (q1["honest_lse"]["points"], q1["honest_lse"]["result"]) == (4, "correct")


def test_ex16_tokens_per_rank_counts_rows_by_expert_rank(tmp_path):
    q1 = _grade(tmp_path, "ex16_moe", EX16)
    assert (q1["by_source"]["points"], q1["by_source"]["result"]) == (0, "incorrect")
    assert (q1["tokens_not_rows"]["points"], q1["tokens_not_rows"]["result"]) == (0, "incorrect")
    assert (q1["honest_bincount"]["points"], q1["honest_bincount"]["result"]) == (3, "correct")
