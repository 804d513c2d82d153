"""The one error helios-env raises: a launcher variable that cannot be trusted.

Hierarchy::

    ValueError
    └── LauncherEnvError        a launcher variable is malformed, missing, or contradicts
                                another one; names the variable and its value
"""

from __future__ import annotations

__all__ = ["LauncherEnvError"]


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
