"""Single-value rank queries, cheap enough to gate every print and log line.

Each query reads and validates only the variables its own answer needs, so a
malformed ``MASTER_PORT``, say, never stops a rank-gated print; the full cross-check
of every variable is ``get_dist_info``'s. Each gives ``get_dist_info``'s answer, with
or without a live group, and raises on the same malformed variable whenever its
answer is read from that variable.

Under torchrun (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``), the
variables are read straight from the bytes behind ``os.environ``; whenever one is
missing, not plain digits, or out of range, or ``HELIOS_LAUNCHER`` is set, the
general path runs instead and
produces the same answer or the same error as ``get_dist_info``.
"""

from __future__ import annotations

from helios_env._detect import FORCE_VARIABLE, detect_with
from helios_env._environ import ENVIRON_BYTES, Getter, environ_get
from helios_env._hostlists import host_count, host_index
from helios_env._integers import parse_int
from helios_env._launcher import SPECS, HostsJson, Launcher, LauncherSpec
from helios_env._learned import learned_layout
from helios_env._sources import ASSUMED, DERIVED
from helios_env._variables import from_variables, live_group, missing

__all__ = ["get_global_rank", "get_local_rank", "get_local_world_size", "get_world_size"]

_FORCE = FORCE_VARIABLE.encode()  # HELIOS_LAUNCHER: the general path decides
# torchrun's RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, as the bytes of os.environ.
_RANK, _WORLD, _LOCAL, _LOCAL_WORLD = (
    name.encode() for name in SPECS[Launcher.TORCHRUN].names if name is not None
)


def _spec() -> LauncherSpec | None:
    return SPECS.get(detect_with(environ_get))


def _required(get: Getter, spec: LauncherSpec, name: str, *, minimum: int) -> int:
    names = spec.names
    if spec.one_per_listed_host and isinstance(spec.hosts, HostsJson):
        # One process per listed host: the rank is this host's place, the size the list's.
        read = host_count if name == names.world_size else host_index
        return read(get, spec.hosts) or 0
    raw = get(name)
    if raw is None:
        if get(names.rank) is None and get(names.world_size) is None:
            from_variables(get, spec)  # raises: the local rank alone, as get_dist_info does
        present = next(
            n for n in (names.rank, names.world_size, names.local_rank) if get(n) is not None
        )
        raise missing(get, present, name)
    return parse_int(name, raw, minimum=minimum)


def _torchrun_value(key: bytes) -> int | None:
    # RANK and friends as plain ASCII digits, else None (the general path decides).
    if ENVIRON_BYTES is None or _FORCE in ENVIRON_BYTES:
        return None
    raw = ENVIRON_BYTES.get(key)
    return int(raw) if raw is not None and raw.isdigit() else None


def _torchrun_layout() -> tuple[int, int, int] | None:
    # (world_size, local_rank, local_world_size) when all four torchrun variables are
    # plain digits and consistent: exactly what get_dist_info reads from them.
    data = ENVIRON_BYTES
    if data is None or _FORCE in data:
        return None
    rank = data.get(_RANK)
    world = data.get(_WORLD)
    local = data.get(_LOCAL)
    local_world = data.get(_LOCAL_WORLD)
    if (
        rank is None
        or world is None
        or local is None
        or local_world is None
        or not (rank.isdigit() and world.isdigit() and local.isdigit() and local_world.isdigit())
    ):
        return None
    world_size, local_rank, local_world_size = int(world), int(local), int(local_world)
    if int(rank) < world_size and local_rank < local_world_size <= world_size:
        return world_size, local_rank, local_world_size
    return None


def get_global_rank() -> int:
    """Get the global rank of this process; 0 outside a distributed run.

    Reads the live group's rank, else the launcher's rank variable (such as ``RANK``);
    validates only that variable.

    Returns:
        ``get_dist_info().rank``.

    Raises:
        LauncherEnvError: The launcher's rank variable is malformed or missing.
    """
    rank = _torchrun_value(_RANK)
    if rank is None:
        spec = _spec()
        rank = 0 if spec is None else _required(environ_get, spec, spec.names.rank, minimum=0)
    group = live_group()
    return rank if group is None else group[0]


def get_world_size() -> int:
    """Get the number of processes in the run; 1 outside a distributed run.

    Reads the live group's size, else the launcher's size variable (such as
    ``WORLD_SIZE``); validates only that variable.

    Returns:
        ``get_dist_info().world_size``.

    Raises:
        LauncherEnvError: The launcher's size variable is malformed or missing.
    """
    size = _torchrun_value(_WORLD)
    if not size:  # None, or 0 (refused by the general path)
        spec = _spec()
        size = 1 if spec is None else _required(environ_get, spec, spec.names.world_size, minimum=1)
    group = live_group()
    return size if group is None else group[1]


def _local() -> tuple[int, int]:  # (local_rank, local_world_size)
    # The local values depend on all four rank variables: a local rank is checked
    # against the processes per node, and derived from the global rank when unset.
    layout = _torchrun_layout()
    assumed = stated = False
    if layout is not None:
        world, local, local_world = layout
    else:
        spec = _spec()
        found = None if spec is None else from_variables(environ_get, spec)
        if found is None:
            world, local, local_world = 0, 0, 1
        else:
            info, sources = found
            world, local, local_world = info.world_size, info.local_rank, info.local_world_size
            assumed = sources["local_world_size"].startswith(ASSUMED)
            stated = not sources["local_rank"].startswith((ASSUMED, DERIVED))
    group = live_group()
    if group is None or (group[1] == world and not assumed):
        return local, local_world
    learned = learned_layout(group)  # what helios_pg.init() learned beats an assumption
    if learned is not None:
        # A local rank a variable states stands; only the assumed size gives way.
        mine = local if stated and group[1] == world else learned.local_rank
        return mine, learned.local_world_size
    if group[1] != world:
        return group[0], group[1]  # the variables describe another run: one node assumed
    return local, local_world


def get_local_rank() -> int:
    """Get the rank of this process on its node; 0 outside a distributed run.

    Reads the launcher's local rank (such as ``LOCAL_RANK``), else derives it from the
    global rank and the processes per node; validates the launcher's rank variables,
    not the rendezvous ones.

    Returns:
        ``get_dist_info().local_rank``.

    Raises:
        LauncherEnvError: A rank variable of the launcher is malformed or missing.
    """
    layout = _torchrun_layout()
    if layout is not None:  # the common case, without building the general answer
        group = live_group()
        if group is None or group[1] == layout[0]:
            return layout[1]
    return _local()[0]


def get_local_world_size() -> int:
    """Get the number of processes on this node; 1 outside a distributed run.

    Reads the launcher's processes per node (such as ``LOCAL_WORLD_SIZE``), else
    assumes one node; validates the launcher's rank variables, not the rendezvous
    ones.

    Returns:
        ``get_dist_info().local_world_size``.

    Raises:
        LauncherEnvError: A rank variable of the launcher is malformed or missing.
    """
    return _local()[1]
