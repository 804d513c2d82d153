"""tools/bench's rows: which way a ratio reads, and how a goal is judged."""

from __future__ import annotations

import pytest

from tools.bench.common import SPEED_UP, row


@pytest.mark.parametrize(
    ("measured", "speed_up", "goal", "ratio", "met"),
    [
        ((2.0, 4.0), False, "<= 0.5", 0.5, True),
        ((2.0, 4.0), False, "<= 0.4", 0.5, False),
        ((2.0, 4.0, 0.4), False, "<= 0.45", 0.4, True),  # a paired median ratio
        ((2.0, 40.0), True, ">= 10", 20.0, True),
        ((2.0, 10.0), True, ">= 10", 5.0, False),
        ((0.2, 1.0), True, "helios <= 300 ms", 5.0, True),  # on helios's own time
        ((0.4, 1.0), True, "helios <= 300 ms", 2.5, False),
        ((9.0, 1.0), False, "report", 9.0, True),
    ],
)
def test_a_row_judges_its_goal(
    measured: tuple[float, ...], speed_up: bool, goal: str, ratio: float, met: bool
) -> None:
    made = row("case", "ours", "theirs", measured, speed_up=speed_up, goal=goal)
    assert made.ratio == pytest.approx(ratio)
    assert (made.met, made.goal) == (met, goal)
    assert made.ratio_meaning == (SPEED_UP if speed_up else "helios / alternative")
