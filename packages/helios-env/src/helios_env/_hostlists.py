"""Hosts that a launcher lists in a variable or a file, and a meeting point it states.

SageMaker lists its hosts as a JSON array and names this one; PBS lists a job's hosts
in a file; AzureML and Kubeflow Trainer state rank 0's address themselves. A list or
an address that cannot be read as the launcher writes it is a :class:`LauncherEnvError`
naming the variable and its value.
"""

from __future__ import annotations

import json
from pathlib import Path

from helios_env._environ import Getter
from helios_env._errors import LauncherEnvError
from helios_env._launcher import GivenMeeting, Hostfile, HostsJson

__all__ = [
    "file_first_host",
    "first_entry",
    "given_meeting",
    "host_count",
    "host_index",
    "listed_hosts",
]


def listed_hosts(get: Getter, hosts: HostsJson) -> list[str] | None:
    """The hosts of a JSON array such as ``["algo-1", "algo-2"]``; None when it is not set.

    Raises:
        LauncherEnvError: The variable is not a non-empty JSON array of host names.
    """
    raw = get(hosts.hosts)
    if raw is None:
        return None
    try:
        found = json.loads(raw)
    except ValueError:
        found = None
    if (
        not isinstance(found, list)
        or not found
        or not all(isinstance(host, str) and host.strip() for host in found)
    ):
        message = (
            f'{hosts.hosts} must be a JSON array of host names such as \'["algo-1", '
            f'"algo-2"]\', got {hosts.hosts}={raw!r}; it is set by the launcher and should '
            "not be edited"
        )
        raise LauncherEnvError(hosts.hosts, raw, message)
    return found


def host_count(get: Getter, hosts: HostsJson) -> int | None:
    """How many hosts the list names; None when it is not set."""
    found = listed_hosts(get, hosts)
    return None if found is None else len(found)


def host_index(get: Getter, hosts: HostsJson) -> int | None:
    """This host's place in the list; None when either variable is not set (or named).

    Raises:
        LauncherEnvError: The list is malformed, or does not name this host.
    """
    name = hosts.current
    current = None if name is None else get(name)
    found = listed_hosts(get, hosts) if current is not None else None
    if name is None or current is None or found is None:
        return None
    if current not in found:
        message = (
            f"{name}={current!r} is not one of the hosts in "
            f"{hosts.hosts}={get(hosts.hosts)!r}; both are set by the launcher: fix its "
            "configuration, or unset both"
        )
        raise LauncherEnvError(name, current, message)
    return found.index(current)


def file_first_host(get: Getter, hosts: Hostfile) -> tuple[str | None, str]:
    """The first host of a file of hosts, one a line, and where it came from."""
    path = get(hosts.path)
    if not path:
        return None, f"not derived: {hosts.path} is not set; set MASTER_ADDR to rank 0's host"
    entry, problem = first_entry(path)
    if problem is not None:
        return None, (
            f"not derived: {hosts.path}={path!r} cannot be read on this node ({problem}); set "
            "MASTER_ADDR to rank 0's host"
        )
    if entry is None:
        return None, f"not derived: {hosts.path}={path!r} lists no host; set MASTER_ADDR"
    return entry, f"derived: first host of {hosts.path}"


def first_entry(path: str) -> tuple[str | None, str | None]:
    """The first line of a file that is not blank or a ``#`` comment, or why it cannot be read.

    Args:
        path: The file.

    Returns:
        ``(entry, None)``, ``(None, None)`` for a file without one, ``(None, why)``.
    """
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return None, str(exc)
    for line in lines:
        entry = line.split("#", 1)[0].strip()
        if entry:
            return entry, None
    return None, None


def given_meeting(
    get: Getter, given: GivenMeeting
) -> tuple[tuple[str, str] | None, tuple[int, str] | None]:
    """Rank 0's address and port as the launcher states them, each with its source.

    Either is None where the launcher's variable is not set.

    Raises:
        LauncherEnvError: The address is empty, or its port is not a TCP port.
    """
    raw = get(given.addr)
    if raw is None:
        return None, None
    if given.port is not None:
        host, port_name, port_raw = raw.strip(), given.port, get(given.port)
        sources = (given.addr, given.port)
    else:
        host, _, port_raw = raw.strip().rpartition(":")
        port_name = given.addr
        sources = (f"derived: the host of {given.addr}", f"derived: the port of {given.addr}")
    if not host:
        shape = "rank 0's host" if given.port is not None else "rank 0's host:port"
        message = (
            f"{given.addr} must be {shape}, got {given.addr}={raw!r}; it is set by the launcher"
        )
        raise LauncherEnvError(given.addr, raw, message)
    if port_raw is None:
        return (host, sources[0]), None
    stripped = port_raw.strip()
    if not (stripped.isascii() and stripped.isdigit() and 0 < int(stripped) <= 65535):
        shown = get(port_name)
        message = (
            f"{port_name} must hold a TCP port in 1..65535, got {port_name}={shown!r}; it is "
            "set by the launcher: set MASTER_ADDR and MASTER_PORT to override it"
        )
        raise LauncherEnvError(port_name, shown, message)
    return (host, sources[0]), (int(stripped), sources[1])
