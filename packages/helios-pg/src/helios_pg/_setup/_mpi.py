"""mpi4py, made to load the library of the MPI that launched this process.

mpi4py's wheels hold one extension per MPI ABI: the MPICH one needs ``libmpi.so.12``
(MPICH's ABI name, also Intel MPI's and MVAPICH2's), the Open MPI one ``libmpi.so.40``.
mpi4py picks by the first MPI library it finds (``libmpi.so`` first, whichever MPI the
system's alternatives chose), unless ``MPI4PY_LIBMPI`` or ``MPI4PY_MPIABI`` says. The
launcher's variables say which MPI started this process before mpi4py is imported, so
its library is loaded first, with its symbols global, and named in ``MPI4PY_LIBMPI``:
Open MPI's ``libmpi.so.40``; for MPICH ``libmpi.so.12``, else the distribution's
``libmpich.so.12`` (Debian and Ubuntu ship MPICH under that name only), loaded from a
copy in memory whose ELF ``DT_SONAME`` says ``libmpi.so.12``, so that the extension's
need for that name is met by it. A variable the user set always wins: then nothing is
loaded here.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import struct
import sys
import sysconfig
from pathlib import Path
from typing import Any, NamedTuple

from helios_env import Launcher

__all__ = [
    "DEBIAN_MPICH",
    "LIBRARIES",
    "LIBRARY_VARIABLE",
    "USER_VARIABLES",
    "MpiImport",
    "import_mpi",
    "load_library",
    "renamed",
    "search_path",
]

LIBRARY_VARIABLE = "MPI4PY_LIBMPI"
USER_VARIABLES = (LIBRARY_VARIABLE, "MPI4PY_MPIABI")
"""mpi4py's own variables: where the user set one, helios loads nothing."""
_OPEN_MPI = "libmpi.so.40"
_MPICH_ABI = "libmpi.so.12"
DEBIAN_MPICH = "libmpich.so.12"
"""MPICH as Debian and Ubuntu ship it: loaded under the ABI name, from a renamed copy."""
LIBRARIES = {
    Launcher.OPEN_MPI: (_OPEN_MPI,),
    Launcher.AZUREML_MPI: (_OPEN_MPI,),
    Launcher.SAGEMAKER_MPI: (_OPEN_MPI,),
    Launcher.MPICH: (_MPICH_ABI, DEBIAN_MPICH),
    Launcher.PALS: (_MPICH_ABI, DEBIAN_MPICH),  # Cray MPICH keeps MPICH's ABI
    Launcher.MVAPICH2: (_MPICH_ABI,),
}
"""The libraries tried for each launcher, in order; the others are left to mpi4py."""

_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14
_PT_LOAD, _PT_DYNAMIC = 1, 2


class MpiImport(NamedTuple):
    """``mpi4py.MPI``, or why it could not be imported (None: mpi4py is not installed)."""

    module: Any
    problem: str | None


def search_path() -> list[Path]:
    """List where the dynamic loader looks for a library by name, as far as Python can tell.

    Returns:
        The folders of ``LD_LIBRARY_PATH``, then the system's library folders.
    """
    multiarch = sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"
    found = [Path(entry) for entry in os.environ.get("LD_LIBRARY_PATH", "").split(":") if entry]
    for base in ("/usr/local/lib", "/usr/lib", "/lib"):
        found += [Path(base, multiarch), Path(base)]
    return [*found, Path("/usr/lib64"), Path("/lib64")]


def renamed(image: bytes, soname: bytes) -> bytes | None:
    """Give a shared library another name: its ELF ``DT_SONAME``, which the loader matches.

    Args:
        image: The bytes of a 64-bit little-endian ELF shared library.
        soname: Its new name, no longer than its old one.

    Returns:
        ``image`` with only the name's bytes changed, in place (padded with NULs); None
        when it is not such a library, or its name is shorter than ``soname``.
    """
    if image[:6] != b"\x7fELF\x02\x01" or len(image) < 64:
        return None
    (phoff,) = struct.unpack_from("<Q", image, 0x20)
    entry_size, count = struct.unpack_from("<HH", image, 0x36)
    loads: list[tuple[int, int, int]] = []  # (address, offset, size) of each loaded part
    dynamic: tuple[int, int] | None = None
    for index in range(count):
        kind, _, offset, address, _, size = struct.unpack_from(
            "<IIQQQQ", image, phoff + index * entry_size
        )
        if kind == _PT_LOAD:
            loads.append((address, offset, size))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, size)
    if dynamic is None:
        return None
    tags: dict[int, int] = {}
    for offset in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", image, offset)
        if tag == _DT_NULL:
            break
        tags.setdefault(tag, value)
    if _DT_STRTAB not in tags or _DT_SONAME not in tags:
        return None
    table = next(
        (
            offset + tags[_DT_STRTAB] - address
            for address, offset, size in loads
            if address <= tags[_DT_STRTAB] < address + size
        ),
        None,
    )
    if table is None:
        return None
    start = table + tags[_DT_SONAME]
    end = image.find(b"\0", start)
    if end < 0 or end - start < len(soname):
        return None
    return image[:start] + soname.ljust(end - start, b"\0") + image[end:]


def _load_as_mpich_abi(name: str) -> None:
    """Load the library ``name`` under MPICH's ABI name, from a renamed copy in memory.

    Raises:
        OSError: No such library on the loader's path, or it cannot be renamed or loaded.
    """
    path = next((folder / name for folder in search_path() if (folder / name).is_file()), None)
    if path is None:
        raise OSError(f"{name}: not found in LD_LIBRARY_PATH or the system's library folders")
    image = renamed(path.read_bytes(), _MPICH_ABI.encode())
    if image is None:
        raise OSError(f"{path}: not an ELF library whose name can be set to {_MPICH_ABI}")
    descriptor = os.memfd_create(_MPICH_ABI)
    try:
        os.write(descriptor, image)
        ctypes.CDLL(f"/proc/self/fd/{descriptor}", os.RTLD_NOW | os.RTLD_GLOBAL)
    finally:
        os.close(descriptor)


def load_library(launcher: Launcher) -> str | None:
    """Load the MPI library of ``launcher``, its symbols global, and name it to mpi4py.

    Args:
        launcher: An MPI flavour of :data:`LIBRARIES`.

    Returns:
        None once one is loaded and ``MPI4PY_LIBMPI`` names it; else why not, naming
        each library tried and the loader's reason.
    """
    tried: list[str] = []
    for name in LIBRARIES[launcher]:
        try:
            if name == DEBIAN_MPICH:
                _load_as_mpich_abi(name)
            else:
                ctypes.CDLL(name, os.RTLD_NOW | os.RTLD_GLOBAL)
        except OSError as error:
            tried.append(f"{name} ({error})")
            continue
        os.environ[LIBRARY_VARIABLE] = name
        return None
    return f"tried {'; '.join(tried)}"


def import_mpi(launcher: Launcher) -> MpiImport:
    """Import ``mpi4py.MPI`` on the MPI library of the MPI that launched this process.

    Args:
        launcher: The launcher that started this process (Open MPI, MPICH, ...).

    Returns:
        The module, or why it could not be imported: mpi4py is not installed (the
        problem is None), or it cannot load an MPI library (the problem names each
        library tried and why it failed).
    """
    module = sys.modules.get("mpi4py.MPI")
    if module is not None:
        return MpiImport(module, None)
    if importlib.util.find_spec("mpi4py") is None:
        return MpiImport(None, None)
    chosen = None
    user_set = any(name in os.environ for name in USER_VARIABLES)
    if not user_set and launcher in LIBRARIES and sys.platform == "linux":
        chosen = load_library(launcher)
    try:
        from mpi4py import MPI  # type: ignore[import-not-found, unused-ignore]
    except (ImportError, OSError, RuntimeError) as error:
        why = f"{type(error).__name__}: {error}".replace("\n", "; ")
        if chosen is not None:
            why = f"no MPI library of {launcher} could be loaded ({chosen}), then {why}"
        elif user_set:
            names = ", ".join(f"{n}={os.environ[n]!r}" for n in USER_VARIABLES if n in os.environ)
            why = f"{why} (with {names})"
        return MpiImport(None, f"mpi4py is installed but cannot load MPI: {why}")
    return MpiImport(MPI, None)
