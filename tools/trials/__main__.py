"""``python -m tools.trials``: preempt a torchrun job the way a cluster does, many times.

Each trial starts ``torchrun --standalone`` of tools/trials/job.py (2 ranks of DDP over
gloo, each fed by a ``DataLoader(num_workers=2)``), waits until it trains, waits a
random moment more (so the signal lands in data loading, forward, backward, the
optimizer step or a save), then sends SIGTERM to every process of the job at once (the
agent, the ranks and their DataLoader workers), as SLURM does on preemption or
``scancel``. A trial is a clean stop when every rank stopped after the same step, the
checkpoint of that step is on disk and no process was killed. Trials alternate
between the shield on (``preemption()``) and off (``shield_workers=False``), so both
run on the same machine in the same minutes. Writes ``tools/results/trials.md`` and
``trials.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tests.support.procs import base_env, process_tree, signal_all, torchrun_command

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tools" / "results"
JOB = Path(__file__).with_name("job.py")
NPROC = 2
START_LIMIT = 90.0
STOP_LIMIT = 60.0


def _wait_for(path: Path, proc: subprocess.Popen[bytes], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def trial(shield: bool, delay: float) -> dict[str, Any]:
    """One job, signalled ``delay`` seconds after its first step; what came of it."""
    with tempfile.TemporaryDirectory(prefix="helios-trial-") as name:
        folder = Path(name)
        env = base_env({"HELIOS_TRIAL_DIR": name, "HELIOS_TRIAL_SHIELD": str(int(shield))})
        command = torchrun_command("--standalone", f"--nproc-per-node={NPROC}", str(JOB))
        log = folder / "log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(
                command,
                env=env,
                cwd=ROOT,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            try:
                if not _wait_for(folder / "training", proc, START_LIMIT):
                    return {"outcome": "did not start", "log": log.read_text()[-2000:]}
                time.sleep(delay)
                signal_all(process_tree(proc.pid), signal.SIGTERM)
                try:
                    proc.wait(timeout=STOP_LIMIT)
                except subprocess.TimeoutExpired:
                    signal_all(process_tree(proc.pid), signal.SIGKILL)
                    proc.wait()
                    return {"outcome": "hung", "log": log.read_text()[-2000:]}
            finally:
                if proc.poll() is None:
                    signal_all(process_tree(proc.pid), signal.SIGKILL)
                    proc.wait()
        return judge(log.read_text(), folder / "checkpoint.pt")


def judge(output: str, checkpoint: Path) -> dict[str, Any]:
    """A clean stop, or what went wrong, from the job's output and its checkpoint."""
    import torch

    lines = [json.loads(line[6:]) for line in output.splitlines() if line.startswith("TRIAL ")]
    phases = sorted({entry["phase"][0] for entry in lines if entry.get("phase")})
    errors = [entry["error"] for entry in lines if "error" in entry]
    if errors:
        return {"outcome": "crashed", "error": errors[0], "phases": phases}
    steps = {entry.get("stopped") for entry in lines}
    if len(lines) != NPROC or len(steps) != 1:
        return {"outcome": "ranks disagree or missing", "lines": lines}
    (step,) = steps
    saved = torch.load(checkpoint, weights_only=True)["step"] if checkpoint.exists() else None
    if saved != step:
        return {"outcome": "checkpoint missing or stale", "step": step, "saved": saved}
    if "closing signal SIGKILL" in output:
        return {"outcome": "killed after the grace", "step": step}
    return {"outcome": "clean stop", "step": step, "phases": phases}


def render(runs: dict[str, list[dict[str, Any]]], meta: dict[str, Any]) -> str:
    lines = [
        f"Python {meta['python']}, torch {meta['torch']}, {meta['machine']}, {meta['date']}; "
        f"`python -m tools.trials --trials {meta['trials']}` took {meta['seconds']} s.",
        "",
        "SIGTERM to every process of a 2-rank torchrun job (ranks and their 2 DataLoader "
        "workers each) at a random moment of training.",
        "",
        "| DataLoader workers | trials | clean stops | what the others got | "
        "what the ranks were doing when it came |",
        "|---|---:|---:|---|---|",
    ]
    for name, results in runs.items():
        outcomes = Counter(result["outcome"] for result in results)
        others = [
            f"{count} {outcome}"
            + (f" ({_first_error(results, outcome)})" if outcome == "crashed" else "")
            for outcome, count in outcomes.items()
            if outcome != "clean stop"
        ]
        phases = Counter(phase for result in results for phase in result.get("phases", []))
        landed = ", ".join(f"{phase} {count}" for phase, count in sorted(phases.items()))
        lines.append(
            f"| {name} | {len(results)} | {outcomes['clean stop']} | "
            f"{'; '.join(others) or 'none'} | {landed} |"
        )
    return "\n".join(lines) + "\n"


def _first_error(results: list[dict[str, Any]], outcome: str) -> str:
    for result in results:
        if result["outcome"] == outcome:
            return str(result.get("error", ""))[:90]
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.trials", description=__doc__)
    parser.add_argument("--trials", type=int, default=20, help="per variant (default 20)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-write", action="store_true", help="print, write nothing")
    args = parser.parse_args(argv)
    chooser = random.Random(args.seed)
    runs: dict[str, list[dict[str, Any]]] = {
        "shielded (preemption())": [],
        "as torch starts them": [],
    }
    started = time.monotonic()
    for index in range(args.trials):
        for shield, name in ((True, "shielded (preemption())"), (False, "as torch starts them")):
            result = trial(shield, chooser.uniform(0.0, 2.0))
            runs[name].append(result)
            print(
                f"trials: {index + 1}/{args.trials} {name}: {result['outcome']}",
                file=sys.stderr,
                flush=True,
            )
    import torch

    meta = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "date": time.strftime("%Y-%m-%d"),
        "trials": args.trials,
        "seconds": round(time.monotonic() - started),
    }
    table = render(runs, meta)
    print(table)
    if not args.no_write:
        (OUT / "trials.json").write_text(json.dumps({"meta": meta, "runs": runs}, indent=2) + "\n")
        (OUT / "trials.md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
