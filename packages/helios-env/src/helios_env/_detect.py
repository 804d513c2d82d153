"""Which launcher started this process, judged from its environment.

Several launchers' variables can be present at once: torchrun started inside an srun
step, mpirun's daemons started as an srun step, a program that spawns its own
processes below srun. The launcher closest to the process wins (torchrun, then
hand-set ``RANK``/``WORLD_SIZE``, then MPI, then SLURM); whether the outer one agrees
is checked by :mod:`helios_env._crosscheck`. ``HELIOS_LAUNCHER`` forces one source.
Each launcher's variables are those of its entry in :mod:`helios_env._launcher`.
"""

from __future__ import annotations

from collections.abc import Mapping

from helios_env._environ import Getter, getter_for
from helios_env._errors import LauncherEnvError
from helios_env._launcher import MPI_SPECS, SPECS, Launcher, LauncherSpec
from helios_env._variables import not_set

__all__ = [
    "FORCE_VARIABLE",
    "detect_launcher",
    "detect_with",
    "is_using_torchrun",
    "mpi_spec",
    "overlap",
    "present",
]

FORCE_VARIABLE = "HELIOS_LAUNCHER"

_TORCHRUN = SPECS[Launcher.TORCHRUN]
_ENV = SPECS[Launcher.ENVIRONMENT]
_SLURM = SPECS[Launcher.SLURM]
# Launchers that set RANK and WORLD_SIZE with variables of their own beside them (their
# own meaning, for Kubeflow's and Vertex AI's), and those that set no RANK at all.
_WITH_RANK = tuple(
    SPECS[launcher]
    for launcher in (Launcher.KUBEFLOW, Launcher.AZUREML, Launcher.VERTEX_AI, Launcher.RAY_TRAIN)
)
_WITHOUT_RANK = (SPECS[Launcher.KUBEFLOW_TRAINER], SPECS[Launcher.SAGEMAKER])
# The MPI flavours grouped by the first variable they need, in order: a process that
# has none of them looks each up once (AzureML's and SageMaker's mpirun set Open MPI's).
_MPI_BY_FIRST: tuple[tuple[str, tuple[LauncherSpec, ...]], ...] = tuple(
    (first, tuple(spec for spec in MPI_SPECS if spec.detect[0] == first))
    for first in dict.fromkeys(spec.detect[0] for spec in MPI_SPECS)
)
_FORCED = {
    "torchrun": Launcher.TORCHRUN,
    "slurm": Launcher.SLURM,
    "mpi": None,
    "env": Launcher.ENVIRONMENT,
    "none": Launcher.NONE,
}


def is_using_torchrun(environ: Mapping[str, str] | None = None) -> bool:
    """Check whether torchrun (torch elastic) started this process.

    True for every rendezvous torchrun offers (standalone, static multi-node and c10d);
    False in a plain process and under ``mp.spawn`` with hand-set ``RANK`` and
    ``WORLD_SIZE``.

    Args:
        environ: The environment to inspect; ``os.environ`` when omitted.

    Returns:
        True if the variables that the torch elastic agent sets for its workers exist.
    """
    return present(getter_for(environ), _TORCHRUN)


def detect_launcher(environ: Mapping[str, str] | None = None) -> Launcher:
    """Name the launcher whose variables describe this process.

    The launcher closest to the process wins: torchrun, then ``RANK`` and
    ``WORLD_SIZE`` (a Kubeflow pod's, AzureML's, Vertex AI's, Ray Train's, else set by
    hand), then MPI (Flux, PALS, AzureML's and SageMaker's mpirun, Open MPI, MVAPICH2,
    LSF, then MPICH/Intel MPI), then an srun step, then a pod or host that runs one
    process (Kubeflow Trainer, SageMaker). A launcher that also sets a more general
    one's variables (PALS sets MPICH's ``PMI_RANK``) is named before it. An srun step
    whose PMI plugin also sets ``PMI_RANK``/``PMI_SIZE`` with the same values
    (``srun --mpi=pmi2``) is SLURM.
    ``HELIOS_LAUNCHER=torchrun|slurm|mpi|env|none`` forces one source.

    Args:
        environ: The environment to inspect; ``os.environ`` when omitted.

    Returns:
        The detected launcher; ``Launcher.NONE`` for a plain process.

    Raises:
        LauncherEnvError: ``HELIOS_LAUNCHER`` is set to an unknown value, or names a
            launcher whose variables are not set.
    """
    return detect_with(getter_for(environ))


def present(get: Getter, spec: LauncherSpec) -> bool:
    """Whether every variable that ``spec``'s launcher sets in its processes is set."""
    for name in spec.detect:  # noqa: SIM110 - cheaper than all(): every rank query runs it
        if get(name) is None:
            return False
    return True


def mpi_spec(get: Getter) -> LauncherSpec | None:
    """The preferred MPI flavour whose rank and size variables are set, if any."""
    for first, specs in _MPI_BY_FIRST:
        if get(first) is not None:
            for spec in specs:
                if present(get, spec):
                    return spec
    return None


def _forced(get: Getter, raw: str) -> Launcher:
    value = raw.strip().lower()
    if value not in _FORCED:
        choices = "|".join(_FORCED)
        message = (
            f"{FORCE_VARIABLE} must be one of {choices}, got {FORCE_VARIABLE}={raw!r}; "
            f"fix it or unset it to detect the launcher"
        )
        raise LauncherEnvError(FORCE_VARIABLE, raw, message)
    launcher = _FORCED[value]
    if launcher is Launcher.NONE:
        return launcher
    if launcher is None:
        found = mpi_spec(get)
        if found is None:
            wanted = ", ".join(f"{spec.names.rank}/{spec.names.world_size}" for spec in MPI_SPECS)
            message = (
                f"{FORCE_VARIABLE}={raw!r} but no MPI rank variables are set (looked for "
                f"{wanted}); start the program with mpirun, or change {FORCE_VARIABLE}"
            )
            raise LauncherEnvError(FORCE_VARIABLE, raw, message)
        return found.launcher
    missing = [name for name in SPECS[launcher].detect if get(name) is None]
    if missing:
        message = (
            f"{FORCE_VARIABLE}={raw!r} but {not_set(missing)}; start the "
            f"program with that launcher, or change {FORCE_VARIABLE}"
        )
        raise LauncherEnvError(FORCE_VARIABLE, raw, message)
    if launcher is Launcher.ENVIRONMENT and present(get, _TORCHRUN):
        return Launcher.TORCHRUN
    return launcher


def detect_with(get: Getter) -> Launcher:
    """Name the launcher whose variables ``get`` finds (see :func:`detect_launcher`).

    Args:
        get: Looks a variable up by name; None when it is not set.

    Returns:
        The detected launcher; ``Launcher.NONE`` for a plain process.

    Raises:
        LauncherEnvError: ``HELIOS_LAUNCHER`` is unknown or names absent variables.
    """
    forced = get(FORCE_VARIABLE)
    if forced is not None:
        return _forced(get, forced)
    env = _ENV.names
    hand_set = get(env.rank) is not None or get(env.world_size) is not None
    # RANK or WORLD_SIZE decide before any MPI flavour is looked for.
    mpi = None if hand_set else mpi_spec(get)
    in_step = not hand_set and present(get, _SLURM)
    # The local rank alone is an error of its own, unless srun or mpirun gave the ranks
    # (``export LOCAL_RANK=$SLURM_LOCALID`` in a job script is common).
    local_alone = get(env.local_rank) is not None and mpi is None and not in_step
    if hand_set or local_alone:
        if present(get, _TORCHRUN):
            return Launcher.TORCHRUN
        return _first_present(get, _WITH_RANK, Launcher.ENVIRONMENT)
    if mpi is not None:
        # srun's PMI plugin may set an MPI flavour's ranks for the step itself.
        ours, srun = mpi.names, _SLURM.names
        same = get(ours.rank) == get(srun.rank) and get(ours.world_size) == get(srun.world_size)
        return Launcher.SLURM if mpi.also_set_by_srun and in_step and same else mpi.launcher
    return Launcher.SLURM if in_step else _first_present(get, _WITHOUT_RANK, Launcher.NONE)


def _first_present(get: Getter, specs: tuple[LauncherSpec, ...], otherwise: Launcher) -> Launcher:
    for spec in specs:
        if present(get, spec):
            return spec.launcher
    return otherwise


def overlap(get: Getter, launcher: Launcher) -> str | None:
    """Why ``launcher`` won over a more general one whose variables are set too, if it did.

    Args:
        get: Looks a variable up by name.
        launcher: The detected launcher.

    Returns:
        ``"PALS_RANKID: pals sets mpich's PMI_RANK and PMI_SIZE too; ..."``, or None
        where no other launcher's variables are all set.
    """
    spec = SPECS.get(launcher)
    if spec is None:
        return None
    shadowed = [SPECS[other] for other in spec.overlaps if present(get, SPECS[other])]
    if not shadowed:
        return None
    own = [name for name in spec.detect if all(name not in o.detect for o in shadowed)]
    theirs = "; ".join(f"{other.launcher}'s {' and '.join(other.detect)}" for other in shadowed)
    found = " and ".join(own) or launcher.value
    return f"{found}: {launcher} sets {theirs} too; the more specific launcher wins"
