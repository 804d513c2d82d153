"""How python -m tools.trials judges a preempted job, and the table it writes."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tools.trials.__main__ import OUT, judge, render


def lines(*entries: dict[str, object]) -> str:
    return "".join(f"TRIAL {json.dumps(entry)}\n" for entry in entries)


def test_a_clean_stop_is_every_rank_after_one_step_with_that_checkpoint(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.pt"
    torch.save({"step": 7}, checkpoint)
    output = lines(
        {"rank": 0, "stopped": 7, "phase": ["backward"]}, {"rank": 1, "stopped": 7, "phase": []}
    )
    assert judge(output, checkpoint) == {"outcome": "clean stop", "step": 7, "phases": ["backward"]}
    assert judge(output, tmp_path / "missing.pt")["outcome"] == "checkpoint missing or stale"
    killed = output + "Sending process 12 closing signal SIGKILL\n"
    assert judge(killed, checkpoint)["outcome"] == "killed after the grace"
    apart = lines({"rank": 0, "stopped": 7}, {"rank": 1, "stopped": 8})
    assert judge(apart, checkpoint)["outcome"] == "ranks disagree or missing"
    crashed = lines({"rank": 1, "error": "RuntimeError: DataLoader worker died", "phase": ["data"]})
    assert judge(crashed, checkpoint) == {
        "outcome": "crashed",
        "error": "RuntimeError: DataLoader worker died",
        "phases": ["data"],
    }


def test_the_table_is_what_the_recorded_trials_render() -> None:
    recorded = json.loads((OUT / "trials.json").read_text())
    assert render(recorded["runs"], recorded["meta"]) == (OUT / "trials.md").read_text()
