"""This process's fingerprint: what every rank of a job must share, and what it should.

A fingerprint is an ordered list of named values: the Python version, torch's (with
its CUDA and NCCL versions where ``helios_pg`` adds them), each installed helios
package's, the backend and device type (``helios_pg`` adds those too), a digest of the
main script's code as this process loaded it, and the values of the variables that
tune torch's backends (``NCCL_*``, ``GLOO_*``, ``TORCH_DISTRIBUTED_*``,
``TORCH_NCCL_*``, ``OMP_NUM_THREADS``). :data:`MUST_AGREE` says which names the ranks must share: a
difference there is an error at ``helios_pg.init()``; anywhere else, a warning. Its
short :attr:`Fingerprint.digest` is what the ranks compare first.

Never imports torch: torch's version comes from the imported module when there is
one, else from the ``version.py`` torch's build wrote (which ``torch.__version__``
reads), else from the installed distribution's metadata; the helios packages' from the
``.dist-info`` directories on ``sys.path``, read once per process.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from helios_env._loaded_code import code_digest, loaded_main_code

__all__ = [
    "HELIOS_PACKAGES",
    "MUST_AGREE",
    "NOT_SET",
    "SETTING_NAMES",
    "SETTING_PREFIXES",
    "Fingerprint",
    "compared",
    "fingerprint",
    "must_agree",
    "script_description",
    "settings",
]

HELIOS_PACKAGES = ("helios-env", "helios-pg", "helios-collectives", "helios-log")
"""The distributions whose versions the ranks compare."""
SETTING_PREFIXES = ("NCCL_", "GLOO_", "TORCH_DISTRIBUTED_", "TORCH_NCCL_")
"""Variables with these prefixes are settings the ranks should share."""
SETTING_NAMES = ("OMP_NUM_THREADS",)
"""Single variables that are settings too."""
MUST_AGREE = frozenset({"python", "torch", "cuda", "nccl", "script", "backend", *HELIOS_PACKAGES})
"""The names whose values every rank must share: ranks that differ run different code."""
NOT_SET = "not set"
"""The value of a name one rank has and another lacks."""
_DIGEST_LENGTH = 16
_TORCH_VERSION = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DIST_INFO = re.compile(r"^(helios_(?:env|pg|collectives|log))-([^-]+)\.dist-info$")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """One rank's fingerprint: named values, in a fixed order.

    Attributes:
        items: ``(name, value)`` pairs: versions first, then the script, the backend and
            device type, then the settings by name.
        digest: A short digest of :meth:`encode`: equal fingerprints, equal digests.
    """

    items: tuple[tuple[str, str], ...]
    digest: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha256(self.encode().encode()).hexdigest()[:_DIGEST_LENGTH]
        object.__setattr__(self, "digest", digest)

    def encode(self) -> str:
        """The fingerprint as compact JSON, the same text for the same items."""
        return json.dumps([list(item) for item in self.items], separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> Fingerprint:
        """Read a fingerprint from the text :meth:`encode` wrote.

        Args:
            text: The JSON text.

        Returns:
            The fingerprint.

        Raises:
            ValueError: The text is not an encoded fingerprint.
        """
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if not isinstance(data, list) or not all(
            isinstance(item, list) and len(item) == 2 and all(isinstance(v, str) for v in item)
            for item in data
        ):
            message = f"not an encoded fingerprint: {text[:200]!r}"
            raise ValueError(message)
        return cls(tuple((name, value) for name, value in data))

    def value(self, name: str) -> str:
        """The value of ``name``, or :data:`NOT_SET` when this fingerprint lacks it."""
        return dict(self.items).get(name, NOT_SET)

    def as_dict(self) -> dict[str, str]:
        """The items as a dictionary, in order."""
        return dict(self.items)

    def format(self, indent: str = "  ") -> str:
        """The items as aligned lines, one per name.

        Args:
            indent: What each line starts with.

        Returns:
            The text, without a trailing newline.
        """
        width = max((len(name) for name, _ in self.items), default=0)
        return "\n".join(f"{indent}{name:<{width}}  {value}" for name, value in self.items)


def must_agree(name: str) -> bool:
    """Whether ranks that differ in ``name`` run different code (an error, not a warning)."""
    return name in MUST_AGREE


def compared(name: str, value: str) -> str:
    """The part of ``value`` the ranks compare: Python's major.minor, the script's digest.

    Args:
        name: The item's name.
        value: Its value.

    Returns:
        ``value`` itself for every other name.
    """
    if name == "python":
        return ".".join(value.split(".")[:2])
    if name == "script":
        return value.rpartition(" ")[2]
    return value


@functools.cache
def _installed_helios() -> tuple[tuple[str, str], ...]:
    """Each helios distribution's version, read once.

    The first ``.dist-info`` on ``sys.path`` says it; else the imported module's
    ``__version__`` (a source tree on ``sys.path``); else the distribution's metadata.
    """
    found: dict[str, str] = {}
    for entry in filter(None, sys.path):
        try:
            with os.scandir(entry) as listed:
                names = [item.name for item in listed]
        except OSError:
            continue
        for name in names:
            match = _DIST_INFO.match(name)
            if match is not None:
                found.setdefault(match[1].replace("_", "-"), match[2])
    for name in HELIOS_PACKAGES:
        version = getattr(sys.modules.get(name.replace("-", "_")), "__version__", None)
        if name not in found and version is not None:
            found[name] = str(version)  # imported from a source tree
        elif name not in found:
            try:
                found[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                found[name] = "not installed"
    return tuple((name, found[name]) for name in HELIOS_PACKAGES)


def _torch_version() -> str:
    """The version torch says: the imported module's, else its ``version.py``'s, unimported."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "__version__", None)
    if version is not None:
        return str(version)
    spec = importlib.util.find_spec("torch")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            found = _TORCH_VERSION.search(Path(folder, "version.py").read_text())
        except OSError:
            continue
        if found is not None:
            return found[1]
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


@functools.cache
def _main_script() -> str:
    """This process's main script, described once: the code that runs is the code it read."""
    return script_description()


def script_description(argv0: str | None = None) -> str:
    """The main script and a digest of its code: ``"train.py sha256:0123..."``.

    For this process's own main script, the digest is of the code the interpreter
    loaded (:mod:`helios_env._loaded_code`): a file edited after this process started
    does not change it. A module run with ``python -m`` is named ``-m NAME``. Without a
    file (``python -c``, an interactive session) the value says so.

    Args:
        argv0: The script's path; ``sys.argv[0]`` when omitted. A path given, and a
            process whose ``__main__`` code is not on its stack (a spawned child), is
            digested as its file compiles now: the same digest as the loaded code.

    Returns:
        The description; its last word is what the ranks compare.
    """
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = argv0 if argv0 is not None else (sys.argv[0] if sys.argv else "")
    label = path
    if argv0 is None and spec is not None and getattr(spec, "name", "__main__") != "__main__":
        label = f"-m {spec.name.removesuffix('.__main__')}"
        path = spec.origin or path
    try:
        source = Path(path).read_bytes()
    except (OSError, ValueError):
        return f"{label or '<interactive>'} (no file)"
    loaded = loaded_main_code() if argv0 is None else None
    if loaded is None:  # a spawned child runs __mp_main__: its file, compiled, is the same
        try:
            loaded = compile(source, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return f"{label} sha256:{hashlib.sha256(source).hexdigest()[:_DIGEST_LENGTH]}"
    return f"{label} sha256:{code_digest(loaded)[:_DIGEST_LENGTH]}"


def settings(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """The variables that tune torch's backends, by name.

    Args:
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        ``(name, value)`` of each ``NCCL_*``, ``GLOO_*``, ``TORCH_DISTRIBUTED_*``,
        ``TORCH_NCCL_*`` and ``OMP_NUM_THREADS`` variable that is set.
    """
    env = os.environ if environ is None else environ
    # By name first: os.environ decodes a value only when it is read.
    names = [name for name in env if name.startswith(SETTING_PREFIXES) or name in SETTING_NAMES]
    return tuple((name, env[name]) for name in sorted(names))


def fingerprint(
    *,
    torch_build: Mapping[str, str] | None = None,
    backend: str | None = None,
    device: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Fingerprint:
    """Build this process's fingerprint.

    What cannot change while the process runs (the versions, the main script) is read
    once; the settings are read from the environment at every call.

    Args:
        torch_build: torch's ``cuda`` and ``nccl`` versions, where the caller knows them
            (``helios_pg`` does, having imported torch).
        backend: The process group's backend, where one is chosen.
        device: The rank's device type (``"cuda"``, ``"cpu"``), where one is chosen.
        environ: The environment; ``os.environ`` when omitted.

    Returns:
        The fingerprint, its items in a fixed order.
    """
    build = tuple((torch_build or {}).items())
    return _built(_torch_version(), build, backend, device, settings(environ))


@functools.lru_cache(maxsize=16)
def _built(
    torch_version: str,
    build: tuple[tuple[str, str], ...],
    backend: str | None,
    device: str | None,
    found: tuple[tuple[str, str], ...],
) -> Fingerprint:
    items = [("python", platform.python_version()), ("torch", torch_version), *build]
    items += [*_installed_helios(), ("script", _main_script())]
    items += [(name, value) for name, value in (("backend", backend), ("device", device)) if value]
    return Fingerprint((*items, *found))
