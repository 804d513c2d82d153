"""What to do when the ranks' calls differ: one piece of advice per difference.

The advice is built from what every rank sees, so it is the same on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["advice", "ranks_text"]

Differences = Mapping[str, Mapping[str, Sequence[int]]]


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 1`` or ``ranks 0, 2``.

    Args:
        ranks: Global ranks.

    Returns:
        The words for them.
    """
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {', '.join(str(r) for r in ranks)}"


def _first_dims_only(shapes: Sequence[str]) -> bool:
    """Whether shapes such as ``(4, 3)`` and ``(2, 3)`` differ in dim 0 alone."""
    rests = {shape.strip("()").partition(",")[2].strip() for shape in shapes}
    return len(rests) == 1 and all(shape.startswith("(") for shape in shapes)


def advice(operation: str, differences: Differences, disagreeing: Sequence[int]) -> list[str]:
    """The fixes for ``differences``, most likely cause first.

    Args:
        operation: The public function, such as ``"all_reduce_tensors"``.
        differences: Each field that differs: every value and the ranks that passed it.
        disagreeing: The ranks whose call is not the most common one.

    Returns:
        One sentence per fix, without a final full stop.
    """
    found: list[str] = []
    who = ranks_text(disagreeing)
    # A field that a rank's description lacks ("none": an empty list has no dtype)
    # follows from another difference; advice about it would mislead.
    differs = {name for name, seen in differences.items() if "none" not in seen}
    if "argument problem" in differences:
        found.append("fix the argument problem shown above on the ranks that have it")
    if "call number" in differs:
        found.append(
            f"{who} made more or fewer helios collective calls on this group before this "
            "one: every rank must make the same calls in the same order (look for a call "
            "under `if rank == 0`, or a loop with another number of steps on some ranks)"
        )
    if "operation" in differs:
        found.append(
            "the ranks are in different collectives: every rank must make the same calls "
            "in the same order"
        )
    shapes = differences.get("shape", {}) if "shape" in differs else {}
    if shapes and operation == "gather_into_tensor" and _first_dims_only(list(shapes)):
        found.append(
            "only dim 0 differs (a smaller last batch?): gather with gather_uneven, which "
            "takes a different dim 0 on every rank and returns every rank's size"
        )
    elif shapes and operation == "all_reduce_tensors":
        found.append(
            f"the tensor's shape differs on {who} (a smaller last batch?): pad it to the "
            "same shape on every rank, drop the last batch on every rank "
            "(DataLoader(drop_last=True)), or reduce sums and counts instead of means"
        )
    elif shapes:
        found.append("pass tensors of the same shape on every rank")
    for name, fix in _SIMPLE:
        if name in differs:
            found.append(fix)
    return found


_SIMPLE = (
    ("dtype", "convert to one dtype on every rank first, e.g. t.to(torch.float32)"),
    ("device type", "put the tensors on the same kind of device on every rank"),
    ("reduce op", "pass the same op on every rank"),
    ("source rank", "pass the same src on every rank"),
)
