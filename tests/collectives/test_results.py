"""Results of the collectives on three gloo ranks, each checked against the same
computation done in this one process (property cases drawn by hypothesis).
"""

from __future__ import annotations

from typing import Any

from tests.collectives.cases import Case, describe, digest, expected
from tests.collectives.conftest import Run


def _mismatches(run: Run, kind: str, *, only: Any = None) -> list[str]:
    """Describe every rank whose result differs from the local computation."""
    found = []
    checked = 0
    for case, outcomes in run.of_kind(kind):
        if only is not None and not only(case):
            continue
        checked += 1
        want = expected(case, run.world)
        for rank, outcome in enumerate(outcomes):
            if not outcome["ok"]:
                found.append(f"{case}: rank {rank} raised {outcome['error']}: {outcome['message']}")
            elif outcome["digest"] != digest(want):
                found.append(f"{case}: rank {rank} got a result other than {describe(want)}")
    assert checked, f"no {kind} case matched"
    return found


def _failed_checks(run: Run, kind: str, check: str, *, only: Any = None) -> list[str]:
    failures = []
    checked = 0
    for case, outcomes in run.of_kind(kind):
        if only is not None and not only(case):
            continue
        checked += 1
        failures += [
            f"{case}: rank {rank}: {outcome}"
            for rank, outcome in enumerate(outcomes)
            if not outcome["ok"] or check in outcome.get("failed_checks", [])
        ]
    assert checked, f"no {kind} case matched"
    return failures


def _is_view(case: Case) -> bool:
    return bool(case["view"] != "contiguous")


def test_gather_into_tensor_matches_a_local_concatenation(property_run: Run) -> None:
    assert _mismatches(property_run, "gather") == []


def test_gather_into_tensor_fills_the_stacked_shape(property_run: Run) -> None:
    stacked = _mismatches(property_run, "gather", only=lambda c: c["layout"] == "stacked")
    assert stacked == []


def test_gather_into_tensor_gathers_non_contiguous_views(property_run: Run) -> None:
    assert _mismatches(property_run, "gather", only=_is_view) == []


def test_gather_into_tensor_leaves_its_input_unchanged(property_run: Run) -> None:
    assert _failed_checks(property_run, "gather", "input_unchanged") == []


def test_all_reduce_tensors_matches_a_local_reduction(property_run: Run) -> None:
    assert _mismatches(property_run, "reduce") == []


def test_all_reduce_tensors_avg_is_the_sum_divided_by_the_world_size(property_run: Run) -> None:
    assert _mismatches(property_run, "reduce", only=lambda c: c["op"] == "AVG") == []


def test_all_reduce_tensors_reduces_a_single_tensor_in_place(property_run: Run) -> None:
    assert _failed_checks(property_run, "reduce", "same_object") == []
    assert _failed_checks(property_run, "reduce", "view_holds_result") == []


def test_all_reduce_tensors_is_right_on_non_contiguous_views(property_run: Run) -> None:
    assert _mismatches(property_run, "reduce", only=_is_view) == []


def test_all_reduce_tensors_writes_nothing_outside_a_view(property_run: Run) -> None:
    assert _failed_checks(property_run, "reduce", "outside_unchanged", only=_is_view) == []


def test_raw_gloo_all_reduce_of_a_view_is_wrong_which_is_what_the_copy_fixes(
    property_run: Run,
) -> None:
    # The control for the two tests above: the same view through the raw torch call.
    # If this starts failing, torch fixed gloo and the tests above lost their teeth.
    ((case, outcomes),) = property_run.of_kind("raw_view_reduce")
    want = digest(expected({**case, "kind": "reduce", "op": "SUM"}, property_run.world))
    wrong = [o for o in outcomes if o["digest"] != want or "failed_checks" in o]
    assert wrong, "raw dist.all_reduce got a non-contiguous view right on every rank"


def test_all_reduce_tensors_of_a_list_reduces_the_flat_concatenation(property_run: Run) -> None:
    assert _mismatches(property_run, "reduce_list") == []


def test_all_reduce_tensors_of_a_list_mixing_0d_and_nd_tensors(property_run: Run) -> None:
    def mixed(case: Case) -> bool:
        ndims = {len(shape) for shape in case["shapes"]}
        return 0 in ndims and len(ndims) > 1

    assert _mismatches(property_run, "reduce_list", only=mixed) == []


def test_all_reduce_tensors_of_a_list_leaves_the_list_unchanged(property_run: Run) -> None:
    assert _failed_checks(property_run, "reduce_list", "inputs_unchanged") == []


def test_results_are_the_same_with_validation_on(property_run: Run) -> None:
    for kind in ("gather", "reduce", "reduce_list"):
        assert _mismatches(property_run, kind, only=lambda c: c["validate"]) == []


def test_gather_uneven_matches_a_local_concatenation(property_run: Run) -> None:
    assert _mismatches(property_run, "uneven") == []


def test_gather_uneven_reports_each_ranks_first_dimension(property_run: Run) -> None:
    wrong = [
        (case["firsts"], outcome.get("sizes"))
        for case, outcomes in property_run.of_kind("uneven")
        for outcome in outcomes
        if outcome.get("sizes") != case["firsts"]
    ]
    assert wrong == []


def test_gather_uneven_handles_empty_ranks(property_run: Run) -> None:
    def some_empty(case: Case) -> bool:
        return 0 in case["firsts"]

    assert _mismatches(property_run, "uneven", only=some_empty) == []


def test_gather_uneven_leaves_its_input_unchanged(property_run: Run) -> None:
    assert _failed_checks(property_run, "uneven", "input_unchanged") == []


def test_workers_exit_cleanly_without_warnings(property_run: Run) -> None:
    for finished in property_run.finished:
        assert finished.returncode == 0, finished.describe()
        # run_processes drains one process at a time: a rank that writes more than a
        # pipe buffer (64 KiB) blocks until the ranks before it exit.
        assert len(finished.stdout) < 32 * 1024
        assert "Warning" not in finished.stderr.replace(_NUMPY_WARNING, ""), finished.stderr
        assert "destroy_process_group" not in finished.stderr, finished.stderr


_NUMPY_WARNING = "UserWarning: Failed to initialize NumPy"
