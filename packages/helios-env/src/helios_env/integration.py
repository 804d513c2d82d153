"""What the packages built on helios-env share with it, beyond the rank queries.

helios-pg and helios-collectives use these names, and so may any package that makes
process groups: record the node layout a group learned (so that
:func:`helios_env.get_dist_info` answers from it while that group lives), build and
compare the fingerprints the ranks must agree on, pick gloo's network interface, read
helios's on/off variables, say which variables are missing in helios's words, say
where each rank should run (to name the ranks that never came), and find (and, once the
run it asked for has started, remove) the requeue marker a stopped run left. Like the
rest of helios-env, nothing here imports torch.
"""

from helios_env._differences import (
    OPT_OUT as AGREEMENT_OPT_OUT,
)
from helios_env._differences import (
    Difference,
    describe,
    differences,
    disagreement_message,
    group_ranks,
    ranks_on,
    settings_message,
)
from helios_env._endpoint import endpoint
from helios_env._expected import expected_hosts
from helios_env._fingerprint import MUST_AGREE, Fingerprint, fingerprint
from helios_env._interface import VARIABLE as GLOO_INTERFACE_VARIABLE
from helios_env._interface import GlooInterface, gloo_interface
from helios_env._learned import LEARNED, forget_layout, learned_layout, record_layout
from helios_env._marker import MARKER_VARIABLE as REQUEUE_MARKER_VARIABLE
from helios_env._marker import consume_requeue_marker, requeue_marker
from helios_env._rendezvous import MPI4PY_HINT
from helios_env._sources import ASSUMED
from helios_env._switches import switch
from helios_env._variables import not_set

__all__ = [
    "AGREEMENT_OPT_OUT",
    "ASSUMED",
    "GLOO_INTERFACE_VARIABLE",
    "LEARNED",
    "MPI4PY_HINT",
    "MUST_AGREE",
    "REQUEUE_MARKER_VARIABLE",
    "Difference",
    "Fingerprint",
    "GlooInterface",
    "consume_requeue_marker",
    "describe",
    "differences",
    "disagreement_message",
    "endpoint",
    "expected_hosts",
    "fingerprint",
    "forget_layout",
    "gloo_interface",
    "group_ranks",
    "learned_layout",
    "not_set",
    "ranks_on",
    "record_layout",
    "requeue_marker",
    "settings_message",
    "switch",
]
