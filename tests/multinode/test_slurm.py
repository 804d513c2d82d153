"""srun, sbatch and salloc on a two-node SLURM cluster form one group across the nodes.

No ``MASTER_ADDR`` or ``MASTER_PORT`` is set: ``helios_pg.init()`` derives them from
the step (its first node, a port from the job and step).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.multinode.checks import (
    FORM_GROUP,
    LIMIT,
    TEST_TIMEOUT,
    describe,
    ranks_by_host,
    spread,
)
from tests.support.netns import VirtualNodes
from tests.support.procs import Finished, torchrun_command
from tests.support.slurm import Cluster

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]


@pytest.mark.parametrize(
    ("options", "placement"),
    [
        # SLURM's default block distribution fills the first node: 3 + 1.
        (["-n4"], {0: 0, 1: 0, 2: 0, 3: 1}),
        (["--ntasks-per-node=2"], {0: 0, 1: 0, 2: 1, 3: 1}),
        (["-n2"], {0: 0, 1: 1}),
    ],
    ids=["n4-three-and-one", "two-per-node", "n2-one-per-node"],
)
def test_srun_forms_the_group_across_nodes(
    cluster: Cluster, nodes: VirtualNodes, options: list[str], placement: dict[int, int]
) -> None:
    finished = cluster.finish(["srun", "-N2", *options, *FORM_GROUP], limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, len(placement), placement=placement)


def test_srun_of_one_torchrun_per_node_forms_the_group(
    cluster: Cluster, nodes: VirtualNodes
) -> None:
    port = nodes.free_port(0)
    agent = torchrun_command("--nnodes=2", "--nproc-per-node=2", "--max-restarts=0")
    # Each task's torchrun meets the others at the job's first node.
    script = (
        'first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1) && exec "$@" '
        f'--rdzv-backend=c10d "--rdzv-endpoint=$first:{port}" "--rdzv-id=$SLURM_JOB_ID" '
        + shlex.quote(FORM_GROUP[1])
    )
    command = ["srun", "-N2", "--ntasks-per-node=1", "sh", "-c", script, "sh", *agent]
    finished = cluster.finish(command, limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    ranks = spread(finished, nodes, 4)
    assert sorted(ranks_by_host(ranks).values()) == [[0, 1], [2, 3]], describe(finished)


def test_an_sbatch_script_forms_the_group_across_nodes(
    cluster: Cluster, nodes: VirtualNodes, tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    output = tmp_path / "job.out"
    script.write_text(f"#!/bin/sh\nsrun {shlex.join(FORM_GROUP)}\n")
    finished = cluster.finish(
        ["sbatch", "--wait", "-N2", "-n3", "-o", str(output), str(script)], limit=LIMIT
    )

    text = output.read_text() if output.exists() else ""
    assert finished.returncode == 0, f"{describe(finished)}\n--- job output ---\n{text}"
    spread(Finished(["sbatch"], 0, text, ""), nodes, 3, placement={0: 0, 1: 0, 2: 1})


def test_salloc_then_srun_forms_the_group_across_nodes(
    cluster: Cluster, nodes: VirtualNodes
) -> None:
    command = ["salloc", "-N2", "--ntasks-per-node=2", "srun", *FORM_GROUP]
    finished = cluster.finish(command, limit=LIMIT)

    assert finished.returncode == 0, describe(finished)
    spread(finished, nodes, 4, placement={0: 0, 1: 0, 2: 1, 3: 1})


def test_rank_zero_placed_on_the_second_node_meets_at_its_host(
    cluster: Cluster, nodes: VirtualNodes, tmp_path: Path
) -> None:
    # --distribution=arbitrary puts task i on line i of SLURM_HOSTFILE: rank 0 on node2.
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node2\nnode1\nnode1\n")
    command = ["srun", "-N2", "-n3", "--distribution=arbitrary", *FORM_GROUP]
    finished = cluster.finish(command, limit=LIMIT, env={"SLURM_HOSTFILE": str(hostfile)})

    assert finished.returncode == 0, describe(finished)
    ranks = spread(finished, nodes, 3, placement={0: 1, 1: 0, 2: 0})
    assert ranks[0]["node_rank"] != ranks[1]["node_rank"]


def test_rank_zero_on_a_node_no_hostfile_names_fails_every_rank_fast(
    cluster: Cluster, nodes: VirtualNodes, tmp_path: Path
) -> None:
    # The hostfile is gone by the time the tasks start: no rank can know where rank 0
    # is, and every one of them says so at once, naming MASTER_ADDR.
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node2\nnode1\n")
    script = tmp_path / "job.sh"
    script.write_text(f'rm -f {shlex.quote(str(hostfile))}\nexec "$@"\n')
    command = ["srun", "-N2", "-n2", "--distribution=arbitrary", "sh", str(script), *FORM_GROUP]
    finished = cluster.finish(command, limit=LIMIT, env={"SLURM_HOSTFILE": str(hostfile)})

    assert finished.returncode != 0
    prefix = "helios_pg._errors.RendezvousConfigError: "
    errors = [line for line in finished.stderr.splitlines() if line.startswith(prefix)]
    assert len(errors) == 2, describe(finished)
    assert all("SLURM_HOSTFILE" in line and "MASTER_ADDR" in line for line in errors), errors


def two_per_node(cluster: Cluster, folder: Path, first: str, timeout: int) -> Finished:
    """``srun -N2 --ntasks-per-node=2`` of the worker, each task running ``first`` before.

    The worker runs as a child of the task's shell (not ``exec``): a ``sleep`` in
    ``first`` delays its process's start, as a late node's launcher would.
    """
    script = folder / "job.sh"
    script.write_text(f'{first}\n"$@"\n')
    command = ["srun", "-N2", "--ntasks-per-node=2", "sh", str(script), *FORM_GROUP]
    return cluster.finish([*command, "--timeout", str(timeout)], limit=LIMIT)


def test_a_node_whose_ranks_never_start_is_named_by_every_rank_that_came(
    cluster: Cluster, tmp_path: Path
) -> None:
    # node2's tasks end before their program starts: node1's ranks wait at the store
    # until the timeout, then name ranks 2-3 and the node SLURM placed them on.
    finished = two_per_node(cluster, tmp_path, '[ "$SLURM_NODEID" = 1 ] && exit 0', 8)

    assert finished.returncode != 0, describe(finished)
    prefix = "helios_pg._errors.ProcessGroupInitError: "
    errors = [line for line in finished.stderr.splitlines() if line.startswith(prefix)]
    assert len(errors) == 2, describe(finished)
    said = "ranks 2-3 (expected on node2) never joined the rendezvous store at "
    assert all(said in line and "; ranks 0-1 (node1) did: they" in line for line in errors), errors


def test_a_node_whose_ranks_start_late_is_named_by_rank_zero(
    cluster: Cluster, tmp_path: Path
) -> None:
    # node2's tasks start their program 30 s after node1's (no rank arrives for more
    # than 10 s: the ranks after are late): rank 0 warns once, naming them, their node
    # and where the time went. 30 s, not 12: on busy cores node1's ranks may take 10 s
    # longer to import torch than node2's, which would close a 12 s gap.
    finished = two_per_node(cluster, tmp_path, '[ "$SLURM_NODEID" = 1 ] && sleep 30', 90)

    assert finished.returncode == 0, describe(finished)
    warned = [line for line in finished.stderr.splitlines() if "StartupWarning: " in line]
    assert len(warned) == 1, describe(finished)
    said = warned[0].split("StartupWarning: ", 1)[1]
    assert said.startswith("ranks 2-3 (node2) reached the rendezvous store "), said
    assert "most of the difference: their processes started " in said, said
