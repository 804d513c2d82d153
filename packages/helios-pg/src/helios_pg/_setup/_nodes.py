"""Learn which ranks share a node, from the host names of the group, once per init.

Used where no launcher variable says which node a rank runs on (mpirun's ranks on
several nodes, a group formed with ``init_method`` and no variables), and to count
the hosts a job really spans. Through the rendezvous store, not a collective
(:mod:`helios_pg._setup._exchange`: every rank sends its host name, rank 0 reads them
all and tells each host its ranks). The ranks of rank 0's host form node 0, the next
new host node 1, and so on, in rank order. :func:`prepare_nodes` does it before the
group forms, then has gloo's interface chosen for the nodes found; with ``init_method``
or ``store``, :func:`learn_after_init` does it through the store of the group that
formed. When init checks that the ranks agree, each rank's fingerprint digest rides in
the same entry (:mod:`helios_pg._setup._agreement`), and the exchange runs also where
the layout is known.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch.distributed as dist

from helios_env import DistributedInfo, EnvironmentReport
from helios_env.integration import ASSUMED, Fingerprint
from helios_pg._errors import ProcessGroupInitError
from helios_pg._setup._agreement import settle
from helios_pg._setup._call import InitCall
from helios_pg._setup._exchange import exchange_hosts
from helios_pg._setup._gloo_interface import bind_gloo, release_gloo
from helios_pg._setup._store import EnvStore
from helios_pg._setup._timeline import Arrival, warn_of_late_start
from helios_pg._setup._torch_errors import Step, map_torch_errors
from helios_pg._torch import destroy_without_deadlock

__all__ = ["learn_after_init", "prepare_nodes", "wants_hosts"]


def _unknown(report: EnvironmentReport, world_size: int) -> bool:
    """Whether no variable says the layout: its node, node count or local size."""
    info = report.info
    if info.node_rank is None or info.num_nodes is None or info.world_size != world_size:
        return True
    return report.sources.get("local_world_size", "").startswith(ASSUMED)


def wants_hosts(report: EnvironmentReport, backend: str, world_size: int) -> bool:
    """Whether this init must learn the ranks' hosts.

    It must where no variable says the layout, and on gloo, which may need an interface
    chosen (a host whose name means loopback). Decided only from what every rank of the
    job shares, since the exchange needs them all.

    Args:
        report: What ``helios_env`` found in the environment.
        backend: The backend the group will use.
        world_size: The number of processes.

    Returns:
        True when every rank must take part in the exchange of host names.
    """
    if world_size == 1:
        return False
    if _unknown(report, world_size):
        return True
    return "gloo" in backend.lower()


def _exchange(
    store: Any,
    prefix: str,
    call: InitCall,
    report: EnvironmentReport,
    agreement: Callable[[], Fingerprint] | None,
    *,
    wanted: bool,
    arrival: Arrival | None = None,
) -> DistributedInfo | None:
    """Exchange hosts, digests and moments; check agreement; the layout if ``wanted``.

    Rank 0 also warns of ranks that reached the store late (:mod:`._timeline`).
    """
    rank, world_size = call.rank, call.world_size
    mine = agreement() if agreement is not None else None
    digest = mine.digest if mine is not None else ""
    with map_torch_errors(call, Step.EXCHANGE):
        roll = exchange_hosts(
            store,
            prefix,
            rank,
            world_size,
            call.wait,
            job_attempt=report.info.attempt,
            digest=digest,
            timing=arrival.encode() if arrival is not None else "",
        )
        table = roll.table
        if mine is not None and table is not None:  # None: every digest is the same
            settle(
                store,
                prefix,
                rank,
                hosts=table.hosts,
                digests=table.digests,
                mine=mine,
                wait=call.wait,
            )
    if rank == 0 and arrival is not None and table is not None:
        # Last, as the agreement's warning: with warnings as errors, no rank waits for
        # a step rank 0 left out.
        warn_of_late_start(table.timings, table.hosts)
    return roll.layout if wanted else None


def prepare_nodes(
    report: EnvironmentReport,
    env_store: EnvStore,
    call: InitCall,
    agreement: Callable[[], Fingerprint] | None = None,
) -> DistributedInfo | None:
    """Learn the layout where needed, then choose gloo's interface, before the group forms.

    Args:
        report: What ``helios_env`` found in the environment.
        env_store: The store every rank reached.
        call: What init knows, with the meeting point; each rank waits
            ``call.wait`` for the others' host names.
        agreement: What builds this rank's fingerprint, when init checks agreement:
            built once every rank reached the store, it rides the exchange of host
            names, which then runs also where the layout is known.

    Returns:
        This rank's layout, or None where :func:`wants_hosts` needs no exchange.

    Raises:
        ProcessGroupInitError: The ranks run different software (a name of
            :data:`helios_env.integration.MUST_AGREE` differs).
    """
    assert call.meeting is not None  # the store was reached there
    layout = None
    wanted = wants_hosts(report, call.backend, call.world_size)
    if wanted or (agreement is not None and call.world_size > 1):
        prefix = env_store.joined_key.replace("/joined/", "/layout/", 1)
        arrival = None
        if call.called and env_store.reached:  # both noted: 0 is "not noted"
            arrival = Arrival.now(call.called, env_store.reached)
        layout = _exchange(
            env_store.store, prefix, call, report, agreement, wanted=wanted, arrival=arrival
        )
    num_nodes = layout.num_nodes if layout else report.num_nodes
    bind_gloo(call.backend, call.meeting.addr, num_nodes)
    return layout


def learn_after_init(
    report: EnvironmentReport,
    call: InitCall,
    agreement: Callable[[], Fingerprint] | None = None,
    *,
    owned: bool = True,
) -> DistributedInfo | None:
    """Learn the layout through the store of a group formed with init_method or store.

    Args:
        report: What ``helios_env`` found in the environment.
        call: What init knows; each rank waits ``call.wait`` for the others'
            host names, and is named by its rank in the group that formed.
        agreement: What builds this rank's fingerprint, when init checks agreement, as
            for :func:`prepare_nodes`.
        owned: Whether init made the group: ranks that disagree destroy it first. An
            adopted group stays for its owner.

    Returns:
        This rank's layout, or None when the environment already says it (or the
        group has no store to exchange through).

    Raises:
        ProcessGroupInitError: The ranks run different software.
    """
    world_size = dist.get_world_size()
    wanted = _unknown(report, world_size)
    getter = getattr(dist.distributed_c10d, "_get_default_store", None)
    if world_size == 1 or not (wanted or agreement is not None) or getter is None:
        return None
    store = getter()
    formed = replace(call, rank=dist.get_rank(), world_size=world_size)
    with map_torch_errors(formed, Step.EXCHANGE):
        generation = -(-int(store.add("helios_pg/layouts", 1)) // world_size)
    prefix = f"helios_pg/layout/{generation}"
    try:
        return _exchange(store, prefix, formed, report, agreement, wanted=wanted)
    except ProcessGroupInitError:
        if owned:
            destroy_without_deadlock()  # the ranks disagree: the group goes before the error
            release_gloo()
        raise
