"""How a report names where a value came from, other than by a variable's name.

Every value helios-env answers is read from a variable (the source is its name),
derived from variables, learned from the process group, or assumed; an assumption is
made only where no variable says otherwise.
"""

from __future__ import annotations

__all__ = ["ASSUMED", "ASSUMED_ONE_NODE", "DEFAULT", "DERIVED", "PROCESS_GROUP"]

PROCESS_GROUP = "process group"
DEFAULT = "default"
DERIVED = "derived"
"""How the source of every value computed from variables begins."""
ASSUMED = "assumed"
"""How the source of every assumed value begins."""
ASSUMED_ONE_NODE = f"{ASSUMED}: one node"
