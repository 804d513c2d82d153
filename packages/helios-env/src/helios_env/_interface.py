"""The network interface gloo should use when this host's own name means loopback.

gloo binds and advertises the address this host's name resolves to. Debian and
Ubuntu map the host's own name to ``127.0.1.1`` in ``/etc/hosts``: on one node that
works, but across nodes every peer is told to connect to its own loopback, and the
group never forms. When ``GLOO_SOCKET_IFNAME`` is unset, the job may span nodes and
the host's name resolves to a loopback address, the interface whose address routes
to ``MASTER_ADDR`` is chosen (on rank 0's own node, where ``MASTER_ADDR`` may mean
loopback too, the one interface that is up and not loopback). Linux only: elsewhere
nothing is chosen. Finding the route sends nothing (a UDP socket is connected, never
written).
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import sys
from dataclasses import dataclass

from helios_env._environ import Getter

__all__ = ["VARIABLE", "GlooInterface", "gloo_interface"]

VARIABLE = "GLOO_SOCKET_IFNAME"
_SIOCGIFFLAGS = 0x8913
_SIOCGIFADDR = 0x8915
_IFF_UP = 0x1
_IFF_LOOPBACK = 0x8


@dataclass(frozen=True, slots=True)
class GlooInterface:
    """What gloo will bind: the interface chosen, where that came from, or the problem."""

    name: str | None
    source: str
    problem: str | None = None


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _ipv4(host: str) -> list[str]:
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(entry[4][0]) for entry in found))


def _interfaces() -> list[tuple[str, str, bool]]:
    """(name, IPv4 address, usable) of each interface with an address: up, not loopback."""
    if not sys.platform.startswith("linux"):
        return []
    import fcntl

    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            names = [name for _, name in socket.if_nameindex()]
        except OSError:
            return []
        for name in names:
            request = struct.pack("256s", name.encode()[:15])
            try:
                address = socket.inet_ntoa(fcntl.ioctl(probe, _SIOCGIFADDR, request)[20:24])
                raw = fcntl.ioctl(probe, _SIOCGIFFLAGS, request)
            except OSError:
                continue  # no IPv4 address
            flags = struct.unpack("H", raw[16:18])[0]
            usable = bool(flags & _IFF_UP) and not flags & _IFF_LOOPBACK
            found.append((name, address, usable))
    return found


def _source_address(destination: str) -> str | None:
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((destination, 9))  # picks a route; a UDP connect sends nothing
        return str(probe.getsockname()[0])
    return None


def gloo_interface(get: Getter, master_addr: str | None, num_nodes: int | None) -> GlooInterface:
    """Decide which interface gloo uses, and whether helios must choose it.

    Args:
        get: Looks a variable up by name.
        master_addr: The rendezvous address, when known.
        num_nodes: The number of nodes, when known.

    Returns:
        The interface to set as ``GLOO_SOCKET_IFNAME`` (None: leave gloo's default),
        the reason, and a problem message when the job spans nodes and no interface
        fits.
    """
    chosen = get(VARIABLE)
    if chosen:
        return GlooInterface(chosen, VARIABLE)
    if num_nodes == 1:
        return GlooInterface(None, "gloo's default: one node")
    host = socket.gethostname()
    own = _ipv4(host)
    if own and not any(_loopback(address) for address in own):
        return GlooInterface(None, f"gloo's default: {host} resolves to {own[0]}")
    if master_addr is None:
        return GlooInterface(None, "gloo's default: no rendezvous address to route to")
    if master_addr == "localhost" or _loopback(master_addr):
        return GlooInterface(None, "gloo's default: MASTER_ADDR is loopback (one host)")
    targets = _ipv4(master_addr)
    if not targets:
        return GlooInterface(None, f"gloo's default: {master_addr} does not resolve here")
    interfaces = _interfaces()
    where = own[0] if own else "no address"
    source = _source_address(targets[0])
    if source is not None and not _loopback(source):
        for name, address, up in interfaces:
            if address == source and up:
                return GlooInterface(
                    name, f"derived: {host} resolves to {where}; {name} routes to {master_addr}"
                )
    if num_nodes is None:
        return GlooInterface(
            None,
            f"gloo's default: {host} resolves to {where}; helios_pg.init() decides once it "
            "has learned how many nodes the job spans",
        )
    usable = [(name, address) for name, address, ok in interfaces if ok]
    # MASTER_ADDR means this host (rank 0's node, whose name maps to loopback too):
    # the peers reach it through its one real interface.
    if len(usable) == 1 and all(_loopback(target) for target in targets):
        name, address = usable[0]
        return GlooInterface(
            name, f"derived: {host} resolves to {where}; {name} ({address}) is the only interface"
        )
    names = ", ".join(f"{name} ({address})" for name, address in usable) or "none"
    problem = (
        f"this job spans {num_nodes} nodes, but this host's name {host!r} resolves to "
        f"{where}, a loopback address that no other node can reach, and no interface routes "
        f"to MASTER_ADDR={master_addr!r} (interfaces up: {names}); set {VARIABLE} to the "
        f"interface the nodes share, or map {host!r} to that interface's address in /etc/hosts"
    )
    return GlooInterface(None, f"not derived: {host} resolves to {where}", problem)
