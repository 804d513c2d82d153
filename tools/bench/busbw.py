"""Case ``busbw``: the bus bandwidth ``python -m helios_collectives`` reports, against the
same program with its sweep's two helios calls made bare (``python -m tools.bench.busbw``),
both under ``torchrun --standalone --nproc-per-node 2``, :data:`ROUNDS` times each in turn;
per size each side's best run counts (other work only ever slows a run down)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from tests.support.procs import base_env, torchrun_command
from tools.bench.common import Measured, format_value, row, run_checked

__all__ = ["ROUNDS", "SIZES", "plot", "run"]

SIZES = ",".join(str(4 * 4**i) for i in range(12))
"""4 B to 16 MiB: the main job's default sweep less its two largest sizes (which would
double the case's time), with its default 20 timed calls after 5 warm-up calls."""
ROUNDS = 5
_NAMES = {"all_reduce": "all-reduce", "all_gather": "all-gather"}
_MAIN = "python -m helios_collectives"


def _sweep(module: str, path: Path) -> list[dict[str, Any]]:
    env = base_env({"CUDA_VISIBLE_DEVICES": "", "PYTHONWARNINGS": "ignore"})
    env.pop("HELIOS_VALIDATE_COLLECTIVES", None)  # the main job measures plain calls
    command = torchrun_command("--standalone", "--nproc-per-node=2")
    command += ["-m", module, "--backend", "gloo", "--sizes", SIZES, "--json", str(path)]
    run_checked(command, env, limit=120)
    points: list[dict[str, Any]] = json.loads(path.read_text())["benchmark"]
    return points


def run() -> Measured:
    """Every size a row; only the all-gather from 1 MiB has a goal: both sides make the
    same all-reduce call, so its ratio is the machine's noise."""
    import torch.distributed as dist

    from helios_collectives._torch_api import gather_function_name

    runs: dict[str, list[list[dict[str, Any]]]] = {"helios": [], "torch": []}
    with tempfile.TemporaryDirectory(prefix="hb-busbw-") as folder:
        for round_ in range(ROUNDS):
            for side in ("helios", "torch")[:: -1 if round_ % 2 else 1]:
                module = "helios_collectives" if side == "helios" else __name__
                runs[side].append(_sweep(module, Path(folder, "sweep.json")))
    calls = {"all_reduce": "dist.all_reduce", "all_gather": f"dist.{gather_function_name(dist)}"}
    bandwidth = partial(row, unit="GB/s", meaning="helios / alternative bandwidth")
    sweep, rows = [], []
    for i, p in enumerate(runs["helios"][0]):
        point = {"operation": p["operation"], "size_bytes": p["size_bytes"]}
        point |= {f"{side} runs": [s[i]["busbw_gbps"] for s in runs[side]] for side in runs}
        point |= {side: max(point[f"{side} runs"]) for side in runs}
        name, size = _NAMES[p["operation"]], format_value(p["size_bytes"], "B")
        case, alternative = f"bus bandwidth, {name} of {size}, 2 ranks", calls[p["operation"]]
        judged = p["operation"] == "all_gather" and p["size_bytes"] >= 2**20
        goal, measured = ">= 0.95" if judged else "report", (point["helios"], point["torch"])
        rows.append(bandwidth(case, _MAIN, alternative, measured, goal=goal))
        sweep.append(point)
    return rows, {"rounds": ROUNDS, "calls": calls, "sweep": sweep}


def plot(data: Mapping[str, Any], path: Path) -> None:
    """Bus bandwidth over message size, both axes logarithmic: both sweeps, both operations."""
    import matplotlib as mpl
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    # Text as text, the same ids and no date: a rerun changes only what it measured.
    mpl.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "helios-bench"})
    figure = Figure(figsize=(7.6, 4.7), layout="constrained")
    ax = figure.add_subplot()
    for operation, name in _NAMES.items():
        points = [p for p in data["sweep"] if p["operation"] == operation]
        for side, style in (("helios", "o-"), ("torch", "s--")):
            label = _MAIN if side == "helios" else data["calls"][operation]
            x, y = [p["size_bytes"] for p in points], [p[side] for p in points]
            ax.plot(x, y, style, mfc="white", label=f"{name}: {label}")
    ax.set(yscale="log", xlabel="message size", ylabel="bus bandwidth")
    ax.set_xscale("log", base=4)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(v, "B")))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(v, "GB/s")))
    ax.set_title("Bus bandwidth over message size, 2 ranks, gloo over 127.0.0.1")
    ax.grid(alpha=0.3)
    ax.legend()
    figure.savefig(path, format="svg", metadata={"Date": None})


def _bare() -> int:
    """``python -m helios_collectives`` with its sweep's two helios calls made bare."""
    import torch.distributed as dist

    from helios_collectives._main import cli, sweep
    from helios_collectives._torch_api import gather_function_name

    gather, namespace = getattr(dist, gather_function_name(dist)), vars(sweep)
    assert {"all_reduce_tensors", "gather_into_tensor"} <= namespace.keys()
    namespace["all_reduce_tensors"] = dist.all_reduce
    namespace["gather_into_tensor"] = lambda tensor, _shape, out: gather(out, tensor)
    return cli.main()


if __name__ == "__main__":
    raise SystemExit(_bare())
