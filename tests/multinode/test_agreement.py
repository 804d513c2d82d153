"""Nodes that run different software or settings, and a node whose link is slow.

Two nodes (the session's): node2's ranks start with another ``NCCL_SOCKET_IFNAME``, run
a copy of the script that differs by one line, or see another torch version through a
test-only shim (:data:`TORCH_SHIM`). Three nodes (built here): the main job's links
section with and without a rate limit on node3's link.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.multinode.checks import LIMIT, TEST_TIMEOUT, describe
from tests.support import netns
from tests.support.netns import VirtualNodes, virtual_nodes
from tests.support.procs import Finished, results

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(TEST_TIMEOUT)]

AGREE = Path(__file__).parent / "workers" / "agree.py"
GROUP_TIMEOUT = 20.0
"""The workers' process-group timeout (``workers/agree.py``)."""
TORCH_SHIM = '''\
"""Test-only shim (tests/multinode/test_agreement.py): this node's torch says 2.5.1."""
import torch
from torch.torch_version import TorchVersion

torch.__version__ = TorchVersion("2.5.1")
'''
"""A ``sitecustomize`` module for node2's ranks: the only way the tests fake a version."""
MAIN_JOB = ["-m", "helios_collectives", "--sizes", "4B", "--iters", "1", "--warmup", "0"]
RATE = "20mbit"
"""node3's rate limit: about 2.5 MB/s, where a virtual link carries GB/s."""


def start_ranks(
    nodes: VirtualNodes,
    args: list[str],
    *,
    per_node: int = 2,
    node_args: Mapping[int, list[str]] | None = None,
    node_env: Mapping[int, Mapping[str, str]] | None = None,
) -> list[Finished]:
    """Start ``per_node`` ranks of ``python ARGS`` on each node by hand; wait for all."""
    port = str(nodes.free_port(0))
    world_size = per_node * len(nodes.nodes)
    commands = []
    for node in nodes.nodes:
        for local in range(per_node):
            env = nodes.env(
                {
                    "RANK": str(node.index * per_node + local),
                    "WORLD_SIZE": str(world_size),
                    "LOCAL_RANK": str(local),
                    "LOCAL_WORLD_SIZE": str(per_node),
                    "MASTER_ADDR": nodes.nodes[0].address,
                    "MASTER_PORT": port,
                    **(node_env or {}).get(node.index, {}),
                }
            )
            command = [sys.executable, *(node_args or {}).get(node.index, args)]
            commands.append((node.index, command, env))
    return nodes.run_all(commands, limit=LIMIT)


def reports(finished: list[Finished], world_size: int) -> list[dict[str, Any]]:
    found = sorted(results(finished), key=lambda report: int(report["rank"]))
    assert [report["rank"] for report in found] == list(range(world_size)), describe(finished)
    return found


def test_a_setting_that_differs_by_node_is_one_warning_naming_it_and_the_ranks(
    nodes: VirtualNodes,
) -> None:
    finished = start_ranks(nodes, [str(AGREE)], node_env={1: {"NCCL_SOCKET_IFNAME": "eth9"}})

    found = reports(finished, 4)
    assert [report.get("total") for report in found] == [4.0] * 4, describe(finished)
    warned = [message for report in found for message in report["warnings"]]
    assert len(warned) == 1, describe(finished)
    assert found[0]["warnings"] == warned
    assert "NCCL_SOCKET_IFNAME: ranks 2-3 (node2) eth9, ranks 0-1 (node1) not set" in warned[0]
    assert "AgreementWarning: the ranks' settings differ" in finished[0].stderr


def test_a_copy_of_the_script_that_differs_by_one_line_fails_every_rank(
    nodes: VirtualNodes, tmp_path: Path
) -> None:
    copy = tmp_path / "agree.py"
    shutil.copy(AGREE, copy)
    with copy.open("a") as script:
        script.write("NODE2_ONLY = 1  # the one line of code node2's copy has\n")

    finished = start_ranks(nodes, [str(AGREE)], node_args={1: [str(copy)]})

    found = reports(finished, 4)
    errors = {report.get("error") for report in found}
    assert len(errors) == 1, describe(finished)
    message = str(errors.pop())
    assert f"ranks 2-3 (node2) run the main script {copy} sha256:" in message
    assert f"ranks 0-1 (node1) the main script {AGREE} sha256:" in message
    assert "HELIOS_AGREEMENT_CHECK=0" in message
    assert all(report["seconds"] < GROUP_TIMEOUT for report in found), describe(finished)


def test_another_torch_on_a_node_is_named_as_such(nodes: VirtualNodes, tmp_path: Path) -> None:
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(TORCH_SHIM)

    finished = start_ranks(nodes, [str(AGREE)], per_node=1, node_env={1: {"PYTHONPATH": str(shim)}})

    found = reports(finished, 2)
    errors = {report.get("error") for report in found}
    assert len(errors) == 1, describe(finished)
    expected = f"rank 1 (node2) runs torch 2.5.1, rank 0 (node1) torch {torch.__version__}"
    assert expected in str(errors.pop()), describe(finished)


def links_section(finished: list[Finished]) -> str:
    """Rank 0's consistency and links sections, printed for the test's log."""
    out = finished[0].stdout
    assert "consistency" in out, describe(finished)
    assert "\nlinks" in out, describe(finished)
    sections = out[out.index("consistency") : out.index("\ndevice binding")]
    sections += out[out.index("\nlinks") : out.index("\nbenchmark")]
    print(sections)
    return sections


def test_the_main_job_names_the_node_whose_link_is_rate_limited() -> None:
    netns.require()
    with virtual_nodes(3) as three:
        plain = start_ranks(three, MAIN_JOB, per_node=1)
        three.limit_rate(2, RATE)
        limited = start_ranks(three, MAIN_JOB, per_node=1)

    assert [item.returncode for item in plain + limited] == [0] * 6, describe(plain + limited)
    before, after = links_section(plain), links_section(limited)
    assert "all ranks agree" in before
    assert "no node named" in before.splitlines()[-1]
    assert "node3 is on every slow link (2 of 3)" in after.splitlines()[-1]
    assert "slowest link node" in after
    for shown in (before, after):
        took = re.search(r"rounds?, ([0-9.]+) s\)", shown)
        assert took is not None
        assert float(took[1]) < 10
