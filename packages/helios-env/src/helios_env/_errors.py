"""What helios-env raises and warns: a launcher variable that cannot be trusted.

Hierarchy::

    ValueError
    ├── LauncherEnvError        a launcher variable is malformed, missing, or contradicts
    │                           another one; names the variable and its value
    └── HostlistError           a SLURM hostlist (``n[01-04]``) that cannot be expanded
    UserWarning
    └── LauncherEnvWarning      two launchers describe this process differently and both
                                readings are legitimate; names the variables of both
"""

from __future__ import annotations

__all__ = ["HostlistError", "LauncherEnvError", "LauncherEnvWarning"]


class LauncherEnvError(ValueError):
    """A launcher variable is malformed or inconsistent with another one.

    Attributes:
        variable: The name of the offending environment variable.
        value: Its raw value, or ``None`` when the problem is that it is missing.
    """

    def __init__(self, variable: str, value: str | None, message: str) -> None:
        super().__init__(message)
        self.variable = variable
        self.value = value

    def __reduce__(self) -> tuple[type[LauncherEnvError], tuple[str, str | None, str]]:
        # The default reduction would call cls(message) and fail: keep all three
        # arguments so the error survives pickling (multiprocessing, concurrent.futures).
        return type(self), (self.variable, self.value, str(self))


class LauncherEnvWarning(UserWarning):
    """Two launchers' variables describe this process differently, both legitimately.

    Raised as a warning, for instance, when a program below srun starts processes of
    its own with ``RANK``/``WORLD_SIZE`` that differ from ``SLURM_PROCID``. Set
    ``HELIOS_LAUNCHER`` to the intended source to silence it.
    """


class HostlistError(ValueError):
    """A SLURM hostlist that cannot be expanded.

    The message names the hostlist and what is wrong with it; a caller that read the
    hostlist from a variable prefixes the variable's name.

    Attributes:
        nodelist: The hostlist as given.
        reason: What is wrong with it, without the hostlist.
    """

    def __init__(self, nodelist: str, reason: str) -> None:
        super().__init__(f"invalid hostlist {nodelist!r}: {reason}")
        self.nodelist = nodelist
        self.reason = reason

    def __reduce__(self) -> tuple[type[HostlistError], tuple[str, str]]:
        # The default reduction would call cls(message) and fail: keep both arguments
        # so the error survives pickling (multiprocessing, concurrent.futures).
        return type(self), (self.nodelist, self.reason)
