"""Worker: report this process's launcher-relevant environment as one ``RESULT`` line.

Prints ``RESULT {"environ": {...}, "tag": ...}`` (see ``tests.support.worker.report``):
the variables whose names start with one of :data:`PREFIXES` or are in :data:`NAMES`.
``--tag`` labels the line, so that a batch script's line is told from its steps'.
Imports neither torch nor helios.
"""

from __future__ import annotations

import argparse
import os

from tests.support.worker import report

PREFIXES = (
    "SLURM_",
    "SLURMD_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "MPI_",
    "MV2_",
    "JSM_",
    "LSB_",
    "PET_",
    "HYDRA_",
    "HYD_",
    "I_MPI_",
    "TORCHELASTIC_",
    "GROUP_",
    "ROLE_",
)
NAMES = frozenset(
    ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
)


def launcher_environ() -> dict[str, str]:
    """This process's launcher-relevant variables, sorted by name."""
    return {
        name: value
        for name, value in sorted(os.environ.items())
        if name in NAMES or name.startswith(PREFIXES)
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    report(environ=launcher_environ(), tag=args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
