"""Benchmarks of helios against the alternatives, side by side in one run.

Every figure is a ratio measured in the same run on the same machine, so the table
compares like with like; absolute times are shown for context only. Run it with::

    uv run python -m tools.bench              # every case: tools/results/bench.{md,json}
    uv run python -m tools.bench busbw ranks  # only these cases; the others are kept
    uv run python -m tools.bench --no-run     # rewrite the tables and the plot from bench.json

``bench.json`` holds each case's rows with the machine, Python, torch and date of the run
that measured it; running some cases replaces only their entries, and ``bench.md`` (the
table the documentation includes), ``busbw.md``, ``busbw.svg`` and the README's table
are rewritten from the whole file (tools/bench/render.py), ``bench.md``'s first line
naming the run or runs behind it.

One module per case, each against what a program would otherwise use: ``imports``,
``gating``, ``init_cost``, ``call_cost``, ``print_gates``, ``collectives`` (two ranks, whose
rank side is ``workers``), ``hostlists``, ``ranks`` and ``busbw``; ``timing`` holds the
paired and interleaved medians that the cases and the workers share.
"""
