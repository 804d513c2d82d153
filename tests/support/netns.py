"""A virtual cluster on this machine: network namespaces that stand for nodes.

:func:`virtual_nodes` builds a hub network namespace holding a Linux bridge and, for
each node, a network namespace joined to the bridge by a veth pair (``eth0`` inside
the node), with loopback up and one address in a ``/24`` picked at random for the run
(``10.R.S.0/24``, clear of this host's routes, addresses and name servers): node ``i``
gets ``10.R.S.(i+1)``. Each node also has

- its own hostname (``node1``, ``node2``, ...) in a persistent UTS namespace, a file
  bind-mounted by ``unshare --uts=FILE``, that every command run there enters;
- its own ``/etc/hosts`` (``/etc/netns/NS/hosts``, which ``ip netns exec``
  bind-mounts over ``/etc/hosts``) that names every node, and a ``resolv.conf``
  without name servers. A node listed in ``loopback_name`` resolves its own name to
  ``127.0.1.1``, as Debian's installer writes it; the others still see its address.

The nodes have no route beyond their subnet: traffic goes to loopback and to the
addresses assigned here, never anywhere else. They share the file system, so unix
sockets (munge's) and files are reachable from every node. ``ip netns exec`` gives
each command a fresh ``/sys``, without the cgroup file systems.

:attr:`VirtualNodes.ssh` is an ssh stand-in for Open MPI (``--mca plm_rsh_agent``)
and MPICH (``-launcher ssh -launcher-exec``): it runs the command on the named node
in a clean, login-like environment.

Cleanup, also after an exception or ``KeyboardInterrupt``, kills every process in
the nodes' namespaces or with :data:`MARKER` in its environment, and removes the
namespaces (with their bridge and veths), the ``/etc/netns`` entries and the
temporary directory. :func:`require` skips a test where this cannot run (not root,
no ``ip``), and fails it under ``CI=true``. Never imports torch.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.procs import (
    DEFAULT_LIMIT,
    Finished,
    kill_until_gone,
    marked_processes,
    run_processes,
)

__all__ = [
    "INTERFACE",
    "MARKER",
    "NETNS_ETC",
    "Node",
    "NodesError",
    "VirtualNodes",
    "missing",
    "require",
    "virtual_nodes",
    "with_cgroups",
]

MARKER = "HELIOS_TEST_NODES"
"""Set, to the run's id, in the environment of every command the nodes run."""
INTERFACE = "eth0"
"""The name of each node's interface on the bridge."""
LOOPBACK_NAME_ADDRESS = "127.0.1.1"
NETNS_ETC = Path("/etc/netns")
CGROUP_ROOT = "/sys/fs/cgroup"
TOOLS = ("ip", "unshare", "nsenter")
SYSTEM_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
MPI_COMMANDS = ("mpirun.openmpi", "orted", "mpirun.mpich", "hydra_pmi_proxy")
STOP_LIMIT = 10.0
SETUP_LIMIT = 20.0


class NodesError(RuntimeError):
    """The virtual nodes could not be built, or a process of theirs survived SIGKILL."""


def missing() -> str | None:
    """Why the virtual nodes cannot be built here, or None when they can."""
    absent = [tool for tool in TOOLS if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed; `apt-get install -y iproute2 util-linux`"
    if os.geteuid() != 0:
        return "network namespaces for virtual nodes need root; run the tests as root"
    probe = subprocess.run(
        ["unshare", "--net", "--uts", "--mount", "true"],
        capture_output=True,
        text=True,
        timeout=SETUP_LIMIT,
        check=False,
    )
    if probe.returncode != 0:
        why = probe.stderr.strip()
        return f"no namespaces here (a container without CAP_SYS_ADMIN?): {why}"
    return None


def require() -> None:
    """Skip the calling test unless virtual nodes can be built; fail it under ``CI=true``."""
    reason = missing()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True, slots=True)
class Node:
    """One virtual node: its name, address and namespaces."""

    index: int
    """Its position, from 0; its name and address count from 1."""
    name: str
    """Its hostname, which every node's ``/etc/hosts`` lists."""
    address: str
    """Its address on the bridge, on :data:`INTERFACE`."""
    netns: str
    """The name of its network namespace (``ip netns``)."""
    uts: Path
    """The file that holds its UTS namespace (its hostname)."""

    def argv(self, *command: str) -> list[str]:
        """The command line that runs ``command`` on this node."""
        return ["ip", "netns", "exec", self.netns, "nsenter", f"--uts={self.uts}", "--", *command]


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=SETUP_LIMIT, check=False
    )
    if check and done.returncode != 0:
        message = f"ip {' '.join(args)} failed with status {done.returncode}: {done.stderr}"
        raise NodesError(message)
    return done


def _netns_inode(name: str) -> int | None:
    try:
        return Path(f"/run/netns/{name}").stat().st_ino
    except OSError:
        return None


def _processes(inodes: Collection[int], marker: str | None) -> list[int]:
    """Live processes in one of the network namespaces ``inodes`` or carrying ``marker``."""
    return marked_processes(MARKER, marker, inodes)


def _kill_all(inodes: Collection[int], marker: str | None, limit: float = STOP_LIMIT) -> list[int]:
    """SIGKILL the processes of ``_processes`` until none is left; return those killed."""
    find = functools.partial(_processes, inodes, marker)
    return kill_until_gone(find, NodesError, "processes of the virtual nodes", limit)


def _taken_networks() -> list[ipaddress.IPv4Network]:
    """This host's routes (but the default), addresses and name servers."""
    taken = []
    for args in (("-j", "-4", "route", "show", "table", "all"), ("-j", "-4", "addr", "show")):
        for item in json.loads(_ip(*args).stdout or "[]"):
            prefixes = [item.get("dst", "default")]
            prefixes += [
                f"{info['local']}/{info.get('prefixlen', 32)}"
                for info in item.get("addr_info", [])
                if "local" in info
            ]
            for prefix in prefixes:
                if prefix != "default":
                    taken.append(ipaddress.IPv4Network(prefix, strict=False))
    with contextlib.suppress(OSError):
        for line in Path("/etc/resolv.conf").read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "nameserver" and ":" not in words[1]:
                taken.append(ipaddress.IPv4Network(words[1]))
    return taken


def _choose_network(rng: random.Random) -> ipaddress.IPv4Network:
    taken = _taken_networks()
    for _ in range(1000):
        candidate = ipaddress.IPv4Network(f"10.{rng.randrange(16, 250)}.{rng.randrange(256)}.0/24")
        if not any(candidate.overlaps(other) for other in taken):
            return candidate
    message = f"no free 10.x.y.0/24 subnet next to this host's routes: {taken}"
    raise NodesError(message)


def _hosts_file(nodes: Sequence[Node], own: Node, loopback_name: bool) -> str:
    lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    if loopback_name:
        lines.append(f"{LOOPBACK_NAME_ADDRESS}\t{own.name}")
    lines += [
        f"{node.address}\t{node.name}" for node in nodes if not (loopback_name and node == own)
    ]
    return "\n".join(lines) + "\n"


def _cgroup_mounts() -> list[tuple[str, str, str]]:
    """This host's file systems at and below ``/sys/fs/cgroup``: (type, path, options)."""
    found = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 4 and (fields[1] + "/").startswith(CGROUP_ROOT + "/"):
                found.append((fields[2], fields[1], fields[3]))
    return found


def with_cgroups(*command: str) -> list[str]:
    """``command`` after mounting this host's cgroup file systems again where it runs.

    ``ip netns exec`` gives each command a fresh ``/sys`` without them; slurmd's
    cgroup plugin needs them even with ``proctrack/linuxproc`` and ``task/none``. The
    mounts are made in the command's own mount namespace (which ``ip netns exec``
    created) and vanish with it: the same hierarchies as this host's, nothing new.
    """
    steps = [
        f"mkdir -p {shlex.quote(path)} && mount -t {shlex.quote(kind)} -o {shlex.quote(options)}"
        f" none {shlex.quote(path)}"
        for kind, path, options in _cgroup_mounts()
    ]
    script = " && ".join([*steps, 'exec "$@"'])
    return ["sh", "-c", script, "sh", *command]


def _login_path() -> str:
    """``PATH`` of a login on a node: this interpreter's bin directory, MPI's, the system's."""
    dirs = [str(Path(sys.executable).parent)]
    for command in MPI_COMMANDS:
        found = shutil.which(command)
        if found:
            dirs.append(str(Path(found).parent))
    dirs += SYSTEM_PATH
    return os.pathsep.join(dict.fromkeys(dirs))


def _ssh_script(nodes: Sequence[Node], base: Mapping[str, str], send_env: Sequence[str]) -> str:
    """An ssh stand-in: ``[options] HOST COMMAND...`` runs ``sh -c COMMAND`` on HOST."""
    cases = "\n".join(
        f"    {node.name}|{node.address}) netns={node.netns} uts={shlex.quote(str(node.uts))} ;;"
        for node in nodes
    )
    login = " ".join(shlex.quote(f"{name}={value}") for name, value in base.items())
    forward = "\n".join(
        f'if [ -n "${{{name}+set}}" ]; then set -- "$@" "{name}=${name}"; fi' for name in send_env
    )
    return f"""\
#!/bin/sh
# ssh for the virtual nodes: [options] [user@]HOST COMMAND...; options are ignored.
while [ "$#" -gt 0 ]; do
    case "$1" in
    --) shift; break ;;
    -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
    -*) shift ;;
    *) break ;;
    esac
done
if [ "$#" -lt 2 ]; then
    echo "ssh (virtual nodes): usage: ssh [options] HOST COMMAND..." >&2
    exit 255
fi
host=${{1#*@}}
shift
command="$*"
case "$host" in
{cases}
    *) echo "ssh (virtual nodes): unknown host $host" >&2; exit 255 ;;
esac
set -- {login}
{forward}
cd {shlex.quote(base.get("HOME", "/"))} 2>/dev/null || cd /
exec env -i "$@" ip netns exec "$netns" nsenter --uts="$uts" -- sh -c "$command"
"""


@dataclass
class VirtualNodes:
    """Running virtual nodes: how to run commands on them and break them."""

    nodes: tuple[Node, ...]
    network: ipaddress.IPv4Network
    """The nodes' subnet."""
    hub: str
    """The network namespace that holds the bridge."""
    root: Path
    """The run's temporary directory (UTS files, the ssh stand-in)."""
    marker: str
    """The run's id: :data:`MARKER`'s value, part of every namespace's name."""
    ssh: Path
    """The ssh stand-in; it passes no variable of the caller's on."""
    loopback_name: frozenset[int] = field(default_factory=frozenset)
    """The nodes whose own name resolves to ``127.0.1.1`` on themselves."""
    started: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)
    """The processes :meth:`popen` started, reaped when the nodes go."""

    def node(self, host: int | str) -> Node:
        """The node at index ``host``, or with that name or address."""
        for node in self.nodes:
            if host in (node.index, node.name, node.address):
                return node
        message = f"no virtual node {host!r}; nodes are {[n.name for n in self.nodes]}"
        raise KeyError(message)

    def argv(self, node: int | str, *command: str) -> list[str]:
        """The command line that runs ``command`` on ``node``."""
        return self.node(node).argv(*command)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A clean, login-like environment (what :attr:`ssh` gives), plus ``extra``.

        ``PATH`` (this interpreter's, MPI's and the system's bin directories), ``HOME``,
        ``LANG`` and :data:`MARKER`; nothing of this process's environment besides.
        """
        env = {
            "PATH": _login_path(),
            "HOME": os.environ.get("HOME", "/root"),
            "LANG": "C.UTF-8",
            MARKER: self.marker,
        }
        if extra:
            env.update(extra)
        return env

    def ssh_agent(self, *, send_env: Sequence[str] = ()) -> Path:
        """An ssh stand-in that also passes the caller's variables ``send_env`` on.

        Like ssh's ``SendEnv``: each variable named that is set where the stand-in runs
        is set on the node too.
        """
        path = self.root / f"ssh-{uuid.uuid4().hex[:8]}"
        path.write_text(_ssh_script(self.nodes, self.env(), send_env))
        path.chmod(0o755)
        return path

    def popen(
        self,
        node: int | str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        log: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``args`` on ``node`` in a session of its own, output to ``log`` or nowhere.

        ``env`` replaces :meth:`env`'s environment; :data:`MARKER` is always set. The
        process is killed when the nodes are, at the latest.
        """
        full_env = dict(env) if env is not None else self.env()
        full_env[MARKER] = self.marker
        with contextlib.ExitStack() as stack:
            sink = stack.enter_context(log.open("ab")) if log else subprocess.DEVNULL
            proc = subprocess.Popen(
                self.argv(node, *args),
                env=full_env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append(proc)
        return proc

    def run(
        self,
        node: int | str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        limit: float = DEFAULT_LIMIT,
        cwd: str | Path | None = None,
    ) -> Finished:
        """Run ``args`` on ``node``, killed after ``limit`` s (see ``procs.run_processes``).

        ``env`` replaces :meth:`env`'s environment; :data:`MARKER` is always set.
        """
        return self.run_all([(node, args, env)], limit=limit, cwd=cwd)[0]

    def run_all(
        self,
        commands: Sequence[tuple[int | str, Sequence[str], Mapping[str, str] | None]],
        *,
        limit: float = DEFAULT_LIMIT,
        cwd: str | Path | None = None,
        raise_on_timeout: bool = True,
        first_exit: bool = False,
    ) -> list[Finished]:
        """Run each ``(node, args, env)`` at once, all killed at ``limit`` s, like :meth:`run`.

        With ``first_exit``, the others are killed once one has exited.

        Raises:
            TimeoutError: Some command ran past ``limit``; every one was killed. With
                ``raise_on_timeout`` false, those are returned with status -9 instead.
        """
        started = []
        for node, args, env in commands:
            full_env = dict(env) if env is not None else self.env()
            full_env[MARKER] = self.marker
            started.append((self.argv(node, *args), full_env))
        return run_processes(
            started,
            limit=limit,
            cwd=cwd,
            raise_on_timeout=raise_on_timeout,
            first_exit=first_exit,
        )

    def free_port(self, node: int | str = 0) -> int:
        """A TCP port free on ``node``'s address, asked of the kernel there."""
        address = self.node(node).address
        code = (
            "import socket\nwith socket.socket() as s:\n"
            f"    s.bind(({address!r}, 0))\n    print(s.getsockname()[1])"
        )
        finished = self.run(node, [sys.executable, "-c", code], limit=30)
        if finished.returncode != 0:
            raise NodesError(f"no free port on {address}:\n{finished.describe()}")
        return int(finished.stdout)

    def _hub_side(self, node: int | str) -> str:
        return f"v{self.marker[-6:]}{self.node(node).index}"

    def link_down(self, node: int | str) -> None:
        """Take ``node``'s link to the bridge down, as if its cable were pulled.

        The node keeps its address and routes: what it sends is dropped, not refused.
        """
        _ip("-n", self.hub, "link", "set", self._hub_side(node), "down")

    def link_up(self, node: int | str) -> None:
        """Bring ``node``'s link to the bridge back up."""
        _ip("-n", self.hub, "link", "set", self._hub_side(node), "up")

    def limit_rate(self, node: int | str, rate: str | None) -> None:
        """Limit ``node``'s link to ``rate`` (``tc`` syntax: ``20mbit``) each way; None lifts it.

        A token bucket (``tbf``) on both ends of the node's veth pair: this kernel has no
        netem. The limit goes with the nodes.
        """
        ends = ((self.hub, self._hub_side(node)), (self.node(node).netns, INTERFACE))
        for netns, device in ends:
            if rate is None:
                command = ["tc", "-n", netns, "qdisc", "del", "dev", device, "root"]
            else:
                shape = ["tbf", "rate", rate, "burst", "64kb", "latency", "100ms"]
                command = ["tc", "-n", netns, "qdisc", "replace", "dev", device, "root", *shape]
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=SETUP_LIMIT, check=False
            )
            if done.returncode != 0 and rate is not None:
                message = f"{' '.join(command)} failed with status {done.returncode}: {done.stderr}"
                raise NodesError(message)

    def namespace_inode(self, node: int | str) -> int:
        """The inode of ``node``'s network namespace: ``/proc/PID/ns/net`` of its processes."""
        inode = _netns_inode(self.node(node).netns)
        if inode is None:
            raise NodesError(f"the network namespace of {self.node(node).name} is gone")
        return inode

    def pids(self, node: int | str) -> list[int]:
        """The live processes in ``node``'s network namespace."""
        inode = _netns_inode(self.node(node).netns)
        return _processes([inode], None) if inode is not None else []

    def kill(self, node: int | str) -> list[int]:
        """SIGKILL every process of ``node``; return their ids.

        Raises:
            NodesError: A process survived SIGKILL for :data:`STOP_LIMIT` s.
        """
        inode = _netns_inode(self.node(node).netns)
        return _kill_all([inode], None) if inode is not None else []


@dataclass
class _Built:
    """What :func:`virtual_nodes` created so far, so cleanup removes just that."""

    namespaces: list[str] = field(default_factory=list)
    uts: list[Path] = field(default_factory=list)
    etc: list[Path] = field(default_factory=list)
    made_etc: bool = False


def _make_etc(netns: str) -> tuple[Path, bool]:
    made = not NETNS_ETC.exists()
    for _ in range(5):
        NETNS_ETC.mkdir(mode=0o755, exist_ok=True)
        try:
            (NETNS_ETC / netns).mkdir()
        except FileNotFoundError:
            continue  # another run removed the empty /etc/netns just now
        return NETNS_ETC / netns, made
    message = f"could not create {NETNS_ETC / netns}"
    raise NodesError(message)


def _build_node(built: _Built, nodes: VirtualNodes, node: Node, bridge: str) -> None:
    _ip("netns", "add", node.netns)
    built.namespaces.append(node.netns)
    hub_side = nodes._hub_side(node.index)
    _ip(
        *("link", "add", hub_side, "netns", nodes.hub, "type", "veth"),
        *("peer", "name", INTERFACE, "netns", node.netns),
    )
    _ip("-n", nodes.hub, "link", "set", hub_side, "master", bridge)
    _ip("-n", nodes.hub, "link", "set", hub_side, "up")
    _ip("-n", node.netns, "link", "set", "lo", "up")
    # IPv4 only: no IPv6 link-local addresses or neighbour discovery on the bridge.
    no_ipv6 = f"net.ipv6.conf.{INTERFACE}.disable_ipv6=1"
    subprocess.run(
        ["ip", "netns", "exec", node.netns, "sysctl", "-q", "-w", no_ipv6],
        capture_output=True,
        timeout=SETUP_LIMIT,
        check=False,
    )
    prefix = f"{node.address}/{nodes.network.prefixlen}"
    _ip("-n", node.netns, "addr", "add", prefix, "dev", INTERFACE)
    _ip("-n", node.netns, "link", "set", INTERFACE, "up")
    node.uts.touch()
    done = subprocess.run(
        ["unshare", f"--uts={node.uts}", "hostname", node.name],
        capture_output=True,
        text=True,
        timeout=SETUP_LIMIT,
        check=False,
    )
    if done.returncode != 0:
        raise NodesError(f"unshare --uts={node.uts} failed: {done.stderr}")
    built.uts.append(node.uts)


def _cleanup(built: _Built, nodes: VirtualNodes) -> None:
    """Kill, unmount and delete everything in ``built``; every step runs."""
    try:
        inodes = [i for i in map(_netns_inode, built.namespaces) if i is not None]
        _kill_all(inodes, nodes.marker)
    finally:
        for proc in nodes.started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_LIMIT)
        for path in built.uts:
            subprocess.run(["umount", str(path)], capture_output=True, timeout=30, check=False)
        for netns in reversed(built.namespaces):
            _ip("netns", "delete", netns, check=False)
        for path in built.etc:
            shutil.rmtree(path, ignore_errors=True)
        if built.made_etc:
            with contextlib.suppress(OSError):
                NETNS_ETC.rmdir()
        shutil.rmtree(nodes.root, ignore_errors=True)


@contextlib.contextmanager
def virtual_nodes(count: int = 2, *, loopback_name: Collection[int] = ()) -> Iterator[VirtualNodes]:
    """Build ``count`` virtual nodes; kill their processes and remove them on exit.

    Args:
        count: How many nodes; node ``i`` (from 0) is ``node{i+1}`` at ``10.R.S.{i+1}``.
        loopback_name: Indexes of the nodes whose own name resolves, on themselves, to
            ``127.0.1.1`` (Debian's default); the other nodes still see their address.

    Raises:
        NodesError: A step of the setup failed (the message says which).
    """
    rng = random.Random()
    marker = f"helios-{os.getpid()}-{rng.randrange(16**6):06x}"
    root = Path(tempfile.mkdtemp(prefix=f"{marker}-"))
    root.chmod(0o755)
    network = _choose_network(rng)
    hosts = list(network.hosts())
    node_list = tuple(
        Node(
            index=i,
            name=f"node{i + 1}",
            address=str(hosts[i]),
            netns=f"{marker}-n{i + 1}",
            uts=root / f"uts-node{i + 1}",
        )
        for i in range(count)
    )
    nodes = VirtualNodes(
        nodes=node_list,
        network=network,
        hub=f"{marker}-hub",
        root=root,
        marker=marker,
        ssh=root / "ssh",
        loopback_name=frozenset(loopback_name),
    )
    built = _Built()
    try:
        _ip("netns", "add", nodes.hub)
        built.namespaces.append(nodes.hub)
        bridge = f"b{marker[-6:]}"
        _ip("-n", nodes.hub, "link", "add", bridge, "type", "bridge")
        _ip("-n", nodes.hub, "link", "set", bridge, "up")
        for node in node_list:
            etc, made = _make_etc(node.netns)
            built.etc.append(etc)
            built.made_etc = built.made_etc or made
            (etc / "hosts").write_text(
                _hosts_file(node_list, node, node.index in nodes.loopback_name)
            )
            (etc / "resolv.conf").write_text("options timeout:1 attempts:1\n")
            _build_node(built, nodes, node, bridge)
        nodes.ssh.write_text(_ssh_script(node_list, nodes.env(), ()))
        nodes.ssh.chmod(0o755)
        yield nodes
    finally:
        _cleanup(built, nodes)
