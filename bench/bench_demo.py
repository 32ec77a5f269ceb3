"""Time ``tpp demo`` end to end (a fresh interpreter, imports included) against its 10 s budget.

    .venv/bin/python bench/bench_demo.py
"""

import subprocess
import sys
import time

BUDGET = 10.0

runs = []
for _ in range(3):
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tpp.cli", "demo"], check=True, capture_output=True)
    runs.append(time.perf_counter() - start)
best = min(runs)
print(f"tpp demo: best of 3 = {best:.2f} s, budget {BUDGET:.0f} s, ratio {best / BUDGET:.2f}")
