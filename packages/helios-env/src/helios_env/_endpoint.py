"""``host:port`` written one way, an IPv6 address in brackets (``[fd00::1]:29500``)."""

from __future__ import annotations

__all__ = ["endpoint"]


def endpoint(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets, as URLs and torch write it.

    Args:
        host: A host name, an IPv4 address or an IPv6 address (with or without brackets).
        port: The port.

    Returns:
        The endpoint, such as ``node1:29500`` or ``[fd00::1]:29500``.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"
