"""What the ranks' forkserver imports once, before it forks any rank.

Every rank is forked from one server process per pytest session, so a module the server
imported costs a rank nothing. Besides torch, pytest and helios-pg, the server imports
the parts of torch that the first ``DistributedDataParallel``, ``fully_shard`` (FSDP2)
or DTensor of a process would import: ``torch._dynamo`` with its compiler stack (sympy,
mpmath: about 900 modules, seconds on every fresh rank otherwise), DTensor and FSDP2,
each under the name the installed torch keeps it (torch before 2.5 keeps DTensor under
``torch.distributed._tensor``, before 2.6 FSDP2 under ``torch.distributed._composable``),
and nothing the installed torch lacks. The ``ranks_preload`` ini option adds the user's
own modules; ``ranks_preload_torch = false`` leaves torch's stack out.

The server reads the names from :data:`PRELOAD_VARIABLE`, set only while the parent
starts it (a rank's environment is the test's, set afresh in every rank). Warnings that
an import raises in the server are not shown: a rank that imports the same module later
finds it imported, as it would after importing it once itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import warnings
from pathlib import Path

__all__ = ["BASE", "PRELOAD_VARIABLE", "preload", "ready", "torch_stack"]

PRELOAD_VARIABLE = "HELIOS_RANKS_PRELOAD"
# pytest too: every rank imports the parent's main module (pytest) and the test module.
BASE = (
    "torch",
    "torch.distributed",
    "pytest",
    "helios_pg._setup._lifecycle",
    "helios_pg._testing._rank",
)


def torch_stack() -> list[str]:
    """The modules of torch's DDP, DTensor and FSDP2 stack that the installed torch has.

    Looked up by file, so that nothing is imported here.

    Returns:
        The module names, in import order; empty when torch is not installed.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return []
    torch_dir = Path(next(iter(spec.submodule_search_locations)))

    def has(relative: str) -> bool:
        return (torch_dir / relative).exists()

    names = []
    if has("_dynamo/__init__.py"):
        names.append("torch._dynamo")
    if has("distributed/tensor/_api.py"):
        names.append("torch.distributed.tensor")
    elif has("distributed/_tensor/__init__.py"):
        names.append("torch.distributed._tensor")
    if has("distributed/fsdp/_fully_shard/__init__.py"):
        names.append("torch.distributed.fsdp")
    elif has("distributed/_composable/fsdp/__init__.py"):
        names.append("torch.distributed._composable.fsdp")
    return names


def preload(names: list[str]) -> None:
    """Import ``names``, each once, with warnings not shown; one that fails is left out.

    Args:
        names: Module names, imported in order.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: S112 - a rank that imports it gets the error itself
                continue


def ready() -> None:
    """Do nothing: the parent forks this once to learn when the server is ready."""


# In the forkserver, which imports this module as its last preload.
_names = os.environ.pop(PRELOAD_VARIABLE, None)
if _names:
    preload(_names.split(","))
