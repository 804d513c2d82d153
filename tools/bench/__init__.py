"""Benchmarks of helios against what a program would otherwise use, side by side in one run.

``uv run python -m tools.bench [CASE ...]`` measures the cases (default: all), keeps each
case's rows in ``tools/results/bench.json`` with the run that measured them, and rewrites
from that file ``bench.md``, ``busbw.svg`` and the README's table (``--no-run``: only
that). docs/benchmarks.md says what each case measures and how.
"""
