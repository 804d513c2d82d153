"""Launcher detection and rank queries for PyTorch distributed programs.

``helios_env`` has no dependencies and never imports torch. It reads the live default
process group when torch already created one, else the launcher's variables (torchrun,
hand-set ``RANK``/``WORLD_SIZE``, Kubeflow, AzureML, Vertex AI, Ray Train, Flux, PALS,
Open MPI, MVAPICH2, LSF, MPICH and Intel MPI, SLURM, SageMaker), else assumes a single
process.
"""

from helios_env._detect import detect_launcher, is_using_torchrun
from helios_env._environment_report import EnvironmentReport
from helios_env._errors import HostlistError, LauncherEnvError, LauncherEnvWarning
from helios_env._hostlist import expand_hostlist
from helios_env._info import DistributedInfo
from helios_env._launcher import Launcher
from helios_env._queries import (
    get_global_rank,
    get_local_rank,
    get_local_world_size,
    get_world_size,
)
from helios_env._resolve import get_dist_info, inspect_environment

__all__ = [
    "DistributedInfo",
    "EnvironmentReport",
    "HostlistError",
    "Launcher",
    "LauncherEnvError",
    "LauncherEnvWarning",
    "detect_launcher",
    "expand_hostlist",
    "get_dist_info",
    "get_global_rank",
    "get_local_rank",
    "get_local_world_size",
    "get_world_size",
    "inspect_environment",
    "is_using_torchrun",
]

__version__ = "0.1.0"
