"""Record launcher environments on a private SLURM cluster and with real mpirun.

    uv run python -m tests.launchers.record [--out tests/env/recorded] [SCENARIO ...]

Runs ``tests/launchers/workers/record_env.py`` under each real launcher and writes one
JSON file per scenario: every rank's launcher variables, exactly as recorded, with
the values helios_env must read from them (``expect``, following the launcher
semantics: the winning source's values, the derived ``master_addr``, or the
variables a cross-check error must name). Needs the launchers
(``bash tools/install_launchers.sh``) and root. Never imports torch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.mpi import OPENMPI_ENV, mpich_command, mpich_env, openmpi_command, openmpi_env
from tests.support.procs import REPO_ROOT, Finished, results, run_processes, torchrun_command
from tests.support.slurm import Cluster, private_cluster

WORKER = Path(__file__).resolve().parent / "workers" / "record_env.py"
OUT = REPO_ROOT / "tests" / "env" / "recorded"
RECORD = [sys.executable, str(WORKER)]

Expect = dict[str, Any]


def _int(environ: Mapping[str, str], name: str) -> int:
    return int(environ[name])


def _slurm_step(environ: Mapping[str, str]) -> bool:
    return "SLURM_PROCID" in environ and "SLURM_STEP_NUM_TASKS" in environ


def _tasks_per_node(spec: str, node: int) -> int:
    """The entry of a SLURM ``2(x3),1`` list at index ``node``."""
    counts: list[int] = []
    for item in spec.split(","):
        count, _, repeat = item.partition("(x")
        counts.extend([int(count)] * (int(repeat.rstrip(")")) if repeat else 1))
    return counts[node]


def _values(
    launcher: str,
    rank: int,
    world: int,
    local_rank: int,
    local_world: int,
    node_rank: int,
    num_nodes: int,
    master_addr: str | None,
) -> Expect:
    return {
        "launcher": launcher,
        "rank": rank,
        "world_size": world,
        "local_rank": local_rank,
        "local_world_size": local_world,
        "node_rank": node_rank,
        "num_nodes": num_nodes,
        "master_addr": master_addr,
    }


MPI = (
    ("open-mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("mpich", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)  # fmt: skip


def _mpi(environ: Mapping[str, str]) -> tuple[str, str, str, str, str] | None:
    for entry in MPI:
        if entry[1] in environ and entry[2] in environ:
            # srun --mpi=pmi2 sets PMI_RANK/PMI_SIZE equal to the step's rank and size:
            # that is the srun step, not a Hydra mpirun.
            pmi2 = (
                entry[0] == "mpich"
                and _slurm_step(environ)
                and environ["PMI_RANK"] == environ["SLURM_PROCID"]
                and environ["PMI_SIZE"] == environ["SLURM_STEP_NUM_TASKS"]
            )
            if not pmi2:
                return entry
    return None


def expect(environ: Mapping[str, str]) -> Expect:
    """What helios_env must make of ``environ`` (see the launcher semantics)."""
    set_addr = environ.get("MASTER_ADDR")
    torchrun = all(
        name in environ
        for name in (
            "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_RESTART_COUNT",
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
        )
    )
    mpi = _mpi(environ)
    if torchrun:
        agents = _int(environ, "GROUP_WORLD_SIZE")
        outer = None
        if mpi is not None and _int(environ, mpi[2]) > 1:
            outer = mpi[2]
        elif _slurm_step(environ) and _int(environ, "SLURM_STEP_NUM_TASKS") > 1:
            outer = "SLURM_STEP_NUM_TASKS"
        if outer is not None and _int(environ, outer) != agents:
            return {"error": ["GROUP_WORLD_SIZE", outer]}
        return _values(
            "torchrun",
            _int(environ, "RANK"),
            _int(environ, "WORLD_SIZE"),
            _int(environ, "LOCAL_RANK"),
            _int(environ, "LOCAL_WORLD_SIZE"),
            _int(environ, "GROUP_RANK"),
            agents,
            set_addr,
        )
    if "RANK" in environ or "WORLD_SIZE" in environ:
        message = "hand-set RANK/WORLD_SIZE: no recorded scenario has them"
        raise NotImplementedError(message)
    if mpi is not None:
        name, rank_var, size_var, local_var, local_size_var = mpi
        rank, world = _int(environ, rank_var), _int(environ, size_var)
        local_world = _int(environ, local_size_var)
        addr = set_addr or ("127.0.0.1" if local_world == world else None)
        return _values(
            name,
            rank,
            world,
            _int(environ, local_var),
            local_world,
            rank // local_world,
            math.ceil(world / local_world),
            addr,
        )
    if _slurm_step(environ):
        node = _int(environ, "SLURM_NODEID")
        nodes = _int(environ, "SLURM_STEP_NUM_NODES")
        if set_addr is None and nodes != 1:
            message = "several nodes: derive the first host of SLURM_STEP_NODELIST"
            raise NotImplementedError(message)
        return _values(
            "slurm",
            _int(environ, "SLURM_PROCID"),
            _int(environ, "SLURM_STEP_NUM_TASKS"),
            _int(environ, "SLURM_LOCALID"),
            _tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"], node),
            node,
            nodes,
            set_addr or "127.0.0.1",
        )
    return _values("none", 0, 1, 0, 1, 0, 1, set_addr)


def _order(environ: Mapping[str, str]) -> tuple[int, int]:
    # Two torchrun jobs in one srun step share their RANKs: order by task first.
    outer = environ.get("SLURM_PROCID") if "TORCHELASTIC_RUN_ID" in environ else None
    rank = expect(environ).get("rank")
    inner = int(environ["RANK"]) if outer is not None else rank
    return (int(outer or 0), int(inner or 0))


@dataclass(frozen=True)
class Scenario:
    """One launch: its file name, description and how to run it."""

    name: str
    description: str
    origin: str
    run: Callable[[Cluster, Path], Finished]
    tag: str = ""
    """Keep only the lines with this tag (a batch script and its step share one run)."""
    launcher: str | None = None
    """The launcher every rank must resolve to (None: an error case)."""
    ranks: int = 0


def _srun(*options: str) -> Callable[[Cluster, Path], Finished]:
    def run(cluster: Cluster, _tmp: Path) -> Finished:
        return cluster.finish(["srun", *options, *RECORD], limit=120)

    return run


def _sbatch(cluster: Cluster, tmp: Path) -> Finished:
    script = tmp / "batch.sh"
    output = tmp / "batch.out"
    record = " ".join(RECORD)
    script.write_text(f"#!/bin/bash\n{record} --tag batch\nsrun {record} --tag step\n")
    finished = cluster.finish(
        ["sbatch", "--wait", "-n", "2", "-o", str(output), str(script)], limit=120
    )
    stdout = output.read_text() if output.exists() else ""
    return Finished(finished.args, finished.returncode, stdout, finished.stderr)


def _salloc_openmpi(cluster: Cluster, _tmp: Path) -> Finished:
    command = ["salloc", "-n", "2", *openmpi_command(2, *RECORD)]
    return cluster.finish(command, env=OPENMPI_ENV, limit=120)


def _salloc_mpich(cluster: Cluster, _tmp: Path) -> Finished:
    command = ["salloc", "-n", "2", *mpich_command(2, *RECORD, launcher=None, hosts=None)]
    return cluster.finish(command, limit=60)


def _openmpi(n: int) -> Callable[[Cluster, Path], Finished]:
    def run(_cluster: Cluster, _tmp: Path) -> Finished:
        command = openmpi_command(n, *RECORD)
        return run_processes([(command, openmpi_env())], limit=120)[0]

    return run


def _mpich(n: int) -> Callable[[Cluster, Path], Finished]:
    def run(_cluster: Cluster, _tmp: Path) -> Finished:
        command = mpich_command(n, *RECORD)
        return run_processes([(command, mpich_env())], limit=120)[0]

    return run


def _srun_torchrun(tasks: int) -> Callable[[Cluster, Path], Finished]:
    def run(cluster: Cluster, _tmp: Path) -> Finished:
        torchrun = torchrun_command("--nproc-per-node", "2", "--standalone", str(WORKER))
        return cluster.finish(["srun", "-n", str(tasks), *torchrun], limit=240)

    return run


def _version(command: Sequence[str], pick: Callable[[str], str]) -> str:
    out = subprocess.run(list(command), capture_output=True, text=True, check=True, timeout=60)
    return pick(out.stdout + out.stderr)


def _origins() -> dict[str, str]:
    slurm = _version(["slurmd", "-V"], lambda s: s.split()[1])
    openmpi = _version(["mpirun.openmpi", "--version"], lambda s: s.splitlines()[0].split()[-1])
    mpich = _version(
        ["mpirun.mpich", "--version"],
        lambda s: next(line.split()[-1] for line in s.splitlines() if "Version:" in line),
    )
    torch = _version(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], lambda s: s.strip()
    )
    return {
        "slurm": f"SLURM {slurm} (Debian slurm-wlm)",
        "openmpi": f"Open MPI {openmpi} (Debian openmpi-bin)",
        "mpich": f"MPICH {mpich} (Debian mpich, Hydra)",
        "torchrun": f"torchrun (torch {torch})",
    }


def scenarios(origins: Mapping[str, str]) -> list[Scenario]:
    """Every recorded scenario."""
    slurm, ompi, mpich, torch = (origins[k] for k in ("slurm", "openmpi", "mpich", "torchrun"))
    return [
        Scenario("slurm-srun-n2", "srun -n 2 on one node", slurm, _srun("-n", "2"), "", "slurm", 2),
        Scenario("slurm-srun-n3", "srun -n 3 on one node", slurm, _srun("-n", "3"), "", "slurm", 3),
        Scenario(
            "slurm-salloc-n2-srun",
            "salloc -n 2, then srun inside the allocation, on one node",
            slurm,
            lambda c, _t: c.finish(["salloc", "-n", "2", "srun", *RECORD], limit=120),
            "",
            "slurm",
            2,
        ),
        Scenario(
            "slurm-sbatch-n2-batch-script",
            "sbatch --wait -n 2: the batch script itself (no step; one process)",
            slurm,
            _sbatch,
            "batch",
            "none",
            1,
        ),
        Scenario(
            "slurm-sbatch-n2-srun",
            "sbatch --wait -n 2: the srun step inside the batch script, on one node",
            slurm,
            _sbatch,
            "step",
            "slurm",
            2,
        ),
        Scenario(
            "slurm-srun-mpi-pmi2-n2",
            "srun --mpi=pmi2 -n 2 on one node (PMI_RANK/PMI_SIZE equal the step's)",
            slurm,
            _srun("--mpi=pmi2", "-n", "2"),
            "",
            "slurm",
            2,
        ),
        Scenario(
            "slurm-srun-mpi-pmix-n2",
            "srun --mpi=pmix -n 2 on one node (PMIx 4, PMIX_RANK/PMIX_NAMESPACE)",
            slurm,
            _srun("--mpi=pmix", "-n", "2"),
            "",
            "slurm",
            2,
        ),
        Scenario(
            "openmpi-mpirun-n2",
            "mpirun -n 2 (Open MPI) on one node",
            ompi,
            _openmpi(2),
            "",
            "open-mpi",
            2,
        ),
        Scenario(
            "openmpi-mpirun-n3",
            "mpirun -n 3 (Open MPI) on one node",
            ompi,
            _openmpi(3),
            "",
            "open-mpi",
            3,
        ),
        Scenario(
            "mpich-mpirun-n2",
            "mpirun -n 2 (MPICH Hydra) on one node",
            mpich,
            _mpich(2),
            "",
            "mpich",
            2,
        ),
        Scenario(
            "mpich-mpirun-n3",
            "mpirun -n 3 (MPICH Hydra) on one node",
            mpich,
            _mpich(3),
            "",
            "mpich",
            3,
        ),
        Scenario(
            "slurm-srun-n2-torchrun-nproc2",
            "srun -n 2 torchrun --nproc-per-node 2 --standalone: the misconfiguration, "
            "two independent torchrun jobs of 2 workers each (4 processes)",
            f"{slurm} and {torch}",
            _srun_torchrun(2),
            "",
            None,
            4,
        ),
        Scenario(
            "slurm-srun-n1-torchrun-nproc2",
            "srun -n 1 torchrun --nproc-per-node 2 --standalone: one torchrun job of 2 workers",
            f"{slurm} and {torch}",
            _srun_torchrun(1),
            "",
            "torchrun",
            2,
        ),
        Scenario(
            "slurm-salloc-n2-openmpi-mpirun-n2",
            "salloc -n 2, then mpirun -n 2 (Open MPI) inside the allocation: MPI beside SLURM",
            f"{slurm} and {ompi}",
            _salloc_openmpi,
            "",
            "open-mpi",
            2,
        ),
        Scenario(
            "slurm-salloc-n2-mpich-mpirun-n2",
            "salloc -n 2, then mpirun -n 2 (MPICH Hydra, which starts its proxy with srun) "
            "inside the allocation: MPI beside an srun step",
            f"{slurm} and {mpich}",
            _salloc_mpich,
            "",
            "mpich",
            2,
        ),
    ]


def record(
    scenario: Scenario,
    cluster: Cluster,
    tmp: Path,
    date: str,
    runs: dict[Callable[[Cluster, Path], Finished], Finished],
) -> dict[str, Any]:
    """Run one scenario; check it against what is known about it; return its file's data.

    Scenarios with the same ``run`` (a batch script and its step) share one run.
    """
    if scenario.run not in runs:
        runs[scenario.run] = scenario.run(cluster, tmp)
    finished = runs[scenario.run]
    if finished.returncode != 0:
        raise RuntimeError(f"{scenario.name} failed:\n{finished.describe()}")
    lines = [item for item in results(finished) if item["tag"] == scenario.tag]
    environs = sorted((item["environ"] for item in lines), key=_order)
    if len(environs) != scenario.ranks:
        message = f"{scenario.name}: {len(environs)} lines, not {scenario.ranks}"
        raise RuntimeError(f"{message}:\n{finished.describe()}")
    ranks = [{"environ": environ, "expect": expect(environ)} for environ in environs]
    for index, item in enumerate(ranks):
        got = item["expect"]
        if scenario.launcher is None:
            assert "error" in got, (scenario.name, got)
            continue
        assert got["launcher"] == scenario.launcher, (scenario.name, got)
        assert (got["rank"], got["world_size"]) == (index, scenario.ranks), (scenario.name, got)
    return {
        "scenario": scenario.description,
        "origin": f"recorded: {scenario.origin}, {date}",
        "ranks": ranks,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("names", nargs="*", help="scenario file names (default: all)")
    args = parser.parse_args(argv)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    chosen = [s for s in scenarios(_origins()) if not args.names or s.name in args.names]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[Callable[[Cluster, Path], Finished], Finished] = {}
    with private_cluster() as cluster:
        for scenario in chosen:
            data = record(scenario, cluster, cluster.root / "tmp", date, runs)
            path = args.out / f"{scenario.name}.json"
            path.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
            print(f"{path.relative_to(REPO_ROOT)}: {len(data['ranks'])} ranks")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
