"""What barrier keeps per group object: its keys' namespace, its count, its wake connections.

A group object's barriers meet under a session prefix of its own in the default group's
store, are numbered from one, and publish wake keys named by a token of this process
and group. The waiting connections are kept with the default group and close with it.
"""

from __future__ import annotations

import weakref

import torch.distributed as dist
from torch._C._distributed_c10d import TCPStore
from torch.distributed.distributed_c10d import Store

from helios_collectives import _wake

__all__ = ["BARRIERS", "POOLS", "group_token", "pool", "session_prefix"]

_KEY_PREFIX = "helios_collectives/barrier"

# The store can outlive a group: torchrun's agent store serves every init of a restart
# attempt, and torch names each new default group "0" again. Each group object gets a
# session number of its own, so a new group never meets the keys of an old one.
_SESSIONS: weakref.WeakKeyDictionary[dist.ProcessGroup, str] = weakref.WeakKeyDictionary()
# Barriers are numbered per group object, so a new group starts again at one.
BARRIERS: weakref.WeakKeyDictionary[dist.ProcessGroup, int] = weakref.WeakKeyDictionary()


_TOKENS: weakref.WeakKeyDictionary[dist.ProcessGroup, str] = weakref.WeakKeyDictionary()


POOLS: weakref.WeakKeyDictionary[dist.ProcessGroup, _wake.Pool] = weakref.WeakKeyDictionary()


def pool(root: TCPStore) -> _wake.Pool:
    # The waiting connections to the default group's store, closed with that group.
    world = dist.distributed_c10d._get_default_group()
    pool = POOLS.get(world)
    if pool is None:
        pool = POOLS[world] = _wake.Pool(root)
    return pool


def group_token(group: dist.ProcessGroup) -> str:
    # Names this process's wake keys for ``group`` in the store's root namespace.
    token = _TOKENS.get(group)
    if token is None:
        token = _TOKENS[group] = _wake.new_token()
    return token


def session_prefix(store: Store, group: dist.ProcessGroup, size: int) -> str:
    prefix = _SESSIONS.get(group)
    if prefix is None:
        base = f"{_KEY_PREFIX}/{group.group_name}"
        # Every member counts in once per group object: members of the n-th group
        # object under this name draw numbers (n-1)*size+1 .. n*size.
        session = -(-int(store.add(f"{base}/sessions", 1)) // size)
        prefix = f"{base}/{session}"
        _SESSIONS[group] = prefix
    return prefix
