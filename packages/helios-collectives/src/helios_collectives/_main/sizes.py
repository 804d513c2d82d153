"""Message sizes for the benchmark sweep: parse ``4B:64MiB`` and format bytes."""

from __future__ import annotations

import re

from helios_collectives._errors import SizeSpecError

__all__ = ["ELEMENT_BYTES", "format_bytes", "parse_size", "parse_sizes"]

ELEMENT_BYTES = 4
"""The sweep's element size: float32."""

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str) -> int:
    """Parse one size such as ``4``, ``4B``, ``64K`` or ``64MiB`` (powers of 1024).

    Args:
        text: The size.

    Returns:
        The size in bytes.

    Raises:
        SizeSpecError: The text is not a positive size with a known unit, or not a
            whole number of float32 elements (the message names the nearest that are).
    """
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS or int(match.group(1)) <= 0:
        message = f"size {text!r} is not a positive size such as 4B, 64K or 64MiB"
        raise SizeSpecError(message)
    size = int(match.group(1)) * _UNITS[unit]
    if size % ELEMENT_BYTES:
        below = size - size % ELEMENT_BYTES
        nearest = [n for n in (below, below + ELEMENT_BYTES) if n > 0]
        options = " or ".join(f"{n}B" for n in nearest)
        message = (
            f"size {text!r} ({size} B) is not a whole number of float32 elements "
            f"({ELEMENT_BYTES} B each): use {options}"
        )
        raise SizeSpecError(message)
    return size


def parse_sizes(spec: str) -> list[int]:
    """Parse a ``--sizes`` value: ``MIN:MAX[:FACTOR]`` or a comma-separated list.

    Args:
        spec: ``"4B:64MiB"`` (MIN times every power of ``FACTOR`` below MAX, then MAX
            itself; factor 4 by default) or ``"8,1K,1MiB"``.

    Returns:
        The sizes in bytes, ascending and without duplicates.

    Raises:
        SizeSpecError: The value cannot be parsed, or MIN exceeds MAX, or the factor is
            below 2.
    """
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) not in (2, 3):
            message = f"--sizes {spec!r}: use MIN:MAX or MIN:MAX:FACTOR, such as 4B:64MiB:4"
            raise SizeSpecError(message)
        low, high = parse_size(parts[0]), parse_size(parts[1])
        factor = int(parts[2]) if len(parts) == 3 and parts[2].isdigit() else 4
        if len(parts) == 3 and (not parts[2].isdigit() or factor < 2):
            message = f"--sizes {spec!r}: the factor must be an integer >= 2, got {parts[2]!r}"
            raise SizeSpecError(message)
        if low > high:
            message = f"--sizes {spec!r}: MIN ({low} B) exceeds MAX ({high} B); swap them"
            raise SizeSpecError(message)
        sizes = []
        size = low
        while size < high:
            sizes.append(size)
            size *= factor
        # The sweep ends at MAX, also where the factor steps over it.
        return [*sizes, high]
    return sorted({parse_size(part) for part in spec.split(",") if part.strip()})


def format_bytes(size: int) -> str:
    """Format a byte count with a binary unit: ``4 B``, ``64 KiB``, ``1.5 MiB``.

    Args:
        size: The byte count.

    Returns:
        The formatted size.
    """
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
