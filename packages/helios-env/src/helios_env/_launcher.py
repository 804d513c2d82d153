"""The launchers helios knows, each with every variable helios reads of it, in one entry.

Each :class:`LauncherSpec` says which variables give a launcher's ranks and sizes,
which tell that it started the process, which name the node and the job, and where
it lists its hosts. Detection (:mod:`helios_env._detect`), the cross-check, the rank
readers, the node layout and the rendezvous read these entries; they name no launcher
variable themselves.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import NamedTuple

__all__ = [
    "MPI_SPECS",
    "SPECS",
    "GivenMeeting",
    "Hostfile",
    "HostsJson",
    "Launcher",
    "LauncherSpec",
    "LsfHosts",
    "Names",
    "SlurmHosts",
    "names_for",
]


class Launcher(str, enum.Enum):
    """The launcher that set this process's rank variables."""

    NONE = "none"
    """A plain process, with no rank variables set (an sbatch script itself, too)."""
    TORCHRUN = "torchrun"
    """torchrun (torch elastic), with any rendezvous."""
    ENVIRONMENT = "environment"
    """``RANK`` and ``WORLD_SIZE`` set by hand or by a program such as ``mp.spawn``."""
    KUBEFLOW = "kubeflow"
    """A Kubeflow PyTorchJob pod running the program without torchrun."""
    OPEN_MPI = "open-mpi"
    """Open MPI's ``mpirun`` (``OMPI_COMM_WORLD_*``)."""
    MVAPICH2 = "mvapich2"
    """MVAPICH2's ``mpirun_rsh`` or ``mpiexec`` (``MV2_COMM_WORLD_*``)."""
    LSF = "lsf"
    """IBM LSF's ``jsrun`` (``JSM_NAMESPACE_*``)."""
    MPICH = "mpich"
    """MPICH, Intel MPI or another Hydra-based ``mpirun`` (``PMI_RANK``, ``PMI_SIZE``)."""
    SLURM = "slurm"
    """A SLURM ``srun`` step (also inside ``salloc`` and ``sbatch``)."""
    AZUREML = "azureml"
    """AzureML's PyTorch distribution, which starts each process itself."""
    AZUREML_MPI = "azureml-mpi"
    """AzureML's MPI distribution, Open MPI's ``mpirun`` with the job's primary node."""
    VERTEX_AI = "vertex-ai"
    """A Vertex AI PyTorch worker pool, with one process per machine."""
    RAY_TRAIN = "ray-train"
    """A Ray Train worker of ``TorchTrainer``."""
    KUBEFLOW_TRAINER = "kubeflow-trainer"
    """A Kubeflow Trainer (v2) TrainJob pod running the program without torchrun."""
    SAGEMAKER = "sagemaker"
    """A SageMaker training host running the program once, without a launcher."""
    SAGEMAKER_MPI = "sagemaker-mpi"
    """SageMaker's MPI launch, Open MPI's ``mpirun`` across the job's hosts."""
    PALS = "pals"
    """HPE Cray PALS's ``mpiexec`` (PBS Pro on Polaris, Aurora)."""
    FLUX = "flux"
    """Flux's ``flux run`` (its job shell)."""

    def __str__(self) -> str:
        return self.value


class Names(NamedTuple):
    """The variables of a launcher's ranks and sizes; None where it sets none."""

    rank: str
    world_size: str
    local_rank: str
    local_world_size: str | None


class SlurmHosts(NamedTuple):
    """Where an srun step lists its hosts, rank 0's first."""

    nodelists: tuple[str, ...]  # compressed hostlists (n[01-04]): the first one set is read
    distribution: str  # "arbitrary": rank 0 runs on the first host of the hostfile instead
    hostfile: str  # one host a line


class LsfHosts(NamedTuple):
    """Where an LSF job lists its hosts: its launch node first, then the compute hosts."""

    rankfile: str  # one host a line
    slots: str  # "host count host count ...", read when there is no rankfile


class HostsJson(NamedTuple):
    """Where a launcher lists its hosts as a JSON array, rank 0's first, and names this one."""

    hosts: str  # '["algo-1", "algo-2"]'
    current: str | None  # this host, one of hosts: its place is the node's index
    # None where the variable does not name each process's own host (SageMaker's MPI
    # launch forwards the master's to every rank): the node is then not known.


class Hostfile(NamedTuple):
    """A file of the job's hosts, one a line, rank 0's first."""

    path: str


class GivenMeeting(NamedTuple):
    """Where the launcher states rank 0's address and port, in variables of its own."""

    addr: str  # a host, or "host:port" when port is None
    port: str | None


@dataclass(frozen=True, slots=True)
class LauncherSpec:
    """Everything helios reads of one launcher's environment, and what it means."""

    launcher: Launcher
    names: Names
    detect: tuple[str, ...]  # set in every process it starts (and required to force it)
    node: str | None = None  # this node's index
    nodes: tuple[str, ...] = ()  # the number of nodes, each a fallback for the one before
    tasks_per_node: tuple[str, ...] = ()  # every node's task count ("2(x3),1"), by node index
    tasks_on_each_node: str | None = None  # one task count that every node runs
    one_per_node: str | None = None  # the source shown when each node (a pod) runs one process
    requested: tuple[str, str] | None = None  # the nodes and processes per node asked for
    job: tuple[tuple[str, ...], ...] = ()  # what names the job, part by part, alternatives each
    job_format: str = ""  # how the job is shown, one {} per part of job
    mpi: bool = False  # found in MPI_SPECS' order; its job: a non-empty one of job, or its proxy
    derives: bool = False  # MASTER_ADDR and MASTER_PORT are derived when unset
    also_set_by_srun: bool = False  # srun's PMI plugin sets its rank variables for a step too
    hosts: SlurmHosts | LsfHosts | HostsJson | Hostfile | GivenMeeting | None = None
    """Where it lists its hosts or states its meeting point, for rank 0's address."""
    overlaps: tuple[Launcher, ...] = ()  # launchers whose variables it sets too: it wins

    @property
    def one_per_listed_host(self) -> bool:
        """Whether a rank is its host's place in a list of hosts (one process per host)."""
        return self.one_per_node is not None and isinstance(self.hosts, HostsJson)


def _mpi(
    launcher: Launcher, names: Names, job: tuple[str, ...], hosts: LsfHosts | None = None
) -> LauncherSpec:
    """An MPI flavour's entry: found by its rank and size, named by one of ``job``."""
    detect, shown = (names.rank, names.world_size), f"{launcher} job {{}}"
    return LauncherSpec(
        launcher, names, detect, job=(job,), job_format=shown, mpi=True, derives=True, hosts=hosts
    )


_ENV = Names("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
_OMPI = Names(
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
)
_TABLE = (
    LauncherSpec(
        Launcher.TORCHRUN,
        _ENV,
        # Set by the torch elastic agent for every worker, whatever the rendezvous
        # (standalone, static multi-node, c10d); never by mp.spawn or by hand.
        ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "RANK", "WORLD_SIZE", "LOCAL_RANK"),
        node="GROUP_RANK",
        nodes=("GROUP_WORLD_SIZE",),
        job=(("TORCHELASTIC_RUN_ID",),),
        job_format="torchrun run {}",
    ),
    LauncherSpec(Launcher.ENVIRONMENT, _ENV, ("RANK", "WORLD_SIZE")),
    # The training operator sets PET_* beside RANK/WORLD_SIZE in every pod; a pod
    # without torchrun runs one process, so the pod's rank is the process's.
    LauncherSpec(
        Launcher.KUBEFLOW,
        Names("RANK", "WORLD_SIZE", "LOCAL_RANK", None),
        ("PET_NNODES",),
        one_per_node="one process per pod (PET_NNODES)",
        requested=("PET_NNODES", "PET_NPROC_PER_NODE"),
    ),
    # AzureML's PyTorch distribution starts every process itself, with RANK, WORLD_SIZE,
    # LOCAL_RANK, NODE_RANK and MASTER_ADDR/PORT (MicrosoftDocs/azure-docs,
    # how-to-train-distributed-gpu.md); AZUREML_NODE_COUNT is the job's instance_count.
    LauncherSpec(
        Launcher.AZUREML,
        Names("RANK", "WORLD_SIZE", "LOCAL_RANK", None),
        ("AZUREML_RUN_ID", "RANK", "WORLD_SIZE"),
        node="NODE_RANK",
        nodes=("AZUREML_NODE_COUNT",),
        job=(("AZUREML_RUN_ID",),),
        job_format="AzureML run {}",
        overlaps=(Launcher.ENVIRONMENT,),
    ),
    # Vertex AI's PyTorch containers set RANK and WORLD_SIZE counting machines, not
    # processes (Google Cloud, "Configuring distributed training for PyTorch"), beside
    # the CLUSTER_SPEC of every distributed job: a process of its own is one per machine.
    LauncherSpec(
        Launcher.VERTEX_AI,
        Names("RANK", "WORLD_SIZE", "LOCAL_RANK", None),
        ("CLUSTER_SPEC", "RANK", "WORLD_SIZE"),
        one_per_node="one process per machine (Vertex AI's WORLD_SIZE counts machines)",
        job=(("CLOUD_ML_JOB_ID",),),
        job_format="Vertex AI job {}",
        overlaps=(Launcher.ENVIRONMENT,),
    ),
    # Ray Train's _set_torch_distributed_env_vars (python/ray/train/torch/config.py) sets
    # torchrun's four, NODE_RANK (newer releases) and ACCELERATE_TORCH_DEVICE in each worker.
    LauncherSpec(
        Launcher.RAY_TRAIN,
        _ENV,
        ("ACCELERATE_TORCH_DEVICE", "RANK", "WORLD_SIZE"),
        node="NODE_RANK",
        overlaps=(Launcher.ENVIRONMENT,),
    ),
    # Kubeflow Trainer's torch plugin (pkg/runtime/framework/plugins/torch/torch.go) sets
    # only PET_* for torchrun: a pod that runs plain python is one process.
    LauncherSpec(
        Launcher.KUBEFLOW_TRAINER,
        Names("PET_NODE_RANK", "PET_NNODES", "LOCAL_RANK", None),
        ("PET_NODE_RANK", "PET_NNODES"),
        one_per_node="one process per pod (PET_NNODES: no torchrun started this one)",
        requested=("PET_NNODES", "PET_NPROC_PER_NODE"),
        derives=True,
        hosts=GivenMeeting("PET_MASTER_ADDR", "PET_MASTER_PORT"),
    ),
    # The SageMaker training toolkit runs the entry point once per host, with its hosts
    # (SM_HOSTS, a JSON array) and its own (SM_CURRENT_HOST); TRAINING_JOB_NAME names it.
    LauncherSpec(
        Launcher.SAGEMAKER,
        Names("SM_CURRENT_HOST", "SM_HOSTS", "LOCAL_RANK", None),
        ("SM_HOSTS", "SM_CURRENT_HOST"),
        one_per_node="one process per host (SM_HOSTS)",
        job=(("TRAINING_JOB_NAME",),),
        job_format="SageMaker job {}",
        derives=True,
        hosts=HostsJson("SM_HOSTS", "SM_CURRENT_HOST"),
    ),
    # The MPI flavours, in the order they are preferred: a launcher that also sets a
    # more general one's variables comes first. LSF's LSB_JOBID names the bsub job, not
    # one jsrun step of it: only PMIx's namespace tells two steps apart.
    # Flux's job shell (flux-core src/shell/task.c, src/shell/pmi/pmi.c) sets FLUX_* and
    # PMI_RANK/PMI_SIZE; its cray-pals plugin (flux-coral2 src/shell/plugins/cray_pals.c)
    # PALS_RANKID and PALS_NODEID, the shell's rank: the node's index.
    LauncherSpec(
        Launcher.FLUX,
        Names("FLUX_TASK_RANK", "FLUX_JOB_SIZE", "FLUX_TASK_LOCAL_ID", None),
        ("FLUX_TASK_RANK", "FLUX_JOB_SIZE"),
        node="PALS_NODEID",
        nodes=("FLUX_JOB_NNODES",),
        job=(("FLUX_JOB_ID",),),
        job_format="flux job {}",
        mpi=True,
        derives=True,
        overlaps=(Launcher.PALS, Launcher.MPICH),
    ),
    # PALS's mpiexec sets PALS_* and Cray PMI's PMI_* (with --pmi=pmix, no PMI_SIZE);
    # rank 0 runs on the first host of the PBS job's node file.
    LauncherSpec(
        Launcher.PALS,
        Names("PALS_RANKID", "PMI_SIZE", "PALS_LOCAL_RANKID", "PMI_LOCAL_SIZE"),
        ("PALS_RANKID",),
        node="PALS_NODEID",
        job=(("PALS_APID", "PBS_JOBID"),),
        job_format="pals job {}",
        mpi=True,
        derives=True,
        hosts=Hostfile("PBS_NODEFILE"),
        overlaps=(Launcher.MPICH,),
    ),
    # AzureML's MPI distribution: Open MPI's mpirun, with the primary node's host:port
    # in AZ_BATCH_MASTER_NODE on several nodes (how-to-train-distributed-gpu.md).
    replace(
        _mpi(Launcher.AZUREML_MPI, _OMPI, ("AZUREML_RUN_ID",)),
        detect=(_OMPI.rank, _OMPI.world_size, "AZ_BATCH_MASTER_NODE"),
        nodes=("AZUREML_NODE_COUNT",),
        hosts=GivenMeeting("AZ_BATCH_MASTER_NODE", None),
        overlaps=(Launcher.OPEN_MPI,),
    ),
    # SageMaker's MPI launch (sagemaker-training-toolkit src/sagemaker_training/mpi.py)
    # runs mpirun from the first host over SM_HOSTS and forwards the master's SM_*
    # variables (-x) to every rank: SM_CURRENT_HOST names the master's host on each.
    replace(
        _mpi(Launcher.SAGEMAKER_MPI, _OMPI, ("TRAINING_JOB_NAME",)),
        detect=(_OMPI.rank, _OMPI.world_size, "SM_HOSTS", "SM_CURRENT_HOST"),
        hosts=HostsJson("SM_HOSTS", None),
        overlaps=(Launcher.OPEN_MPI,),
    ),
    _mpi(
        Launcher.OPEN_MPI,
        _OMPI,
        ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid"),
    ),
    # mpirun_rsh's mpispawn sets the node's index and the job's node count too
    # (MVAPICH2 src/pm/mpirun/mpispawn.c).
    replace(
        _mpi(
            Launcher.MVAPICH2,
            Names(
                "MV2_COMM_WORLD_RANK",
                "MV2_COMM_WORLD_SIZE",
                "MV2_COMM_WORLD_LOCAL_RANK",
                "MV2_COMM_WORLD_LOCAL_SIZE",
            ),
            ("MPIRUN_ID", "PMI_JOBID"),
        ),
        node="MV2_NODE_ID",
        nodes=("MV2_NUM_NODES_IN_JOB",),
    ),
    _mpi(
        Launcher.LSF,
        Names(
            "JSM_NAMESPACE_RANK",
            "JSM_NAMESPACE_SIZE",
            "JSM_NAMESPACE_LOCAL_RANK",
            "JSM_NAMESPACE_LOCAL_SIZE",
        ),
        ("PMIX_NAMESPACE",),
        hosts=LsfHosts("LSB_DJOB_RANKFILE", "LSB_MCPU_HOSTS"),
    ),
    # Plain MPICH's Hydra names no job: see _rendezvous. srun --mpi=pmi2 sets PMI_* too.
    replace(
        _mpi(
            Launcher.MPICH,
            Names("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
            ("I_MPI_HYDRA_UUID", "PMI_JOBID"),
        ),
        also_set_by_srun=True,
    ),
    # SLURM_STEP_NUM_TASKS is set inside an srun step only, not in the batch script,
    # where SLURM_PROCID would describe one process of a job that has not started its
    # tasks yet. srun sets SLURM_NNODES and SLURM_TASKS_PER_NODE to the step's values
    # too, unless --preserve-env keeps the job's; SLURM_NTASKS_PER_NODE is the
    # --ntasks-per-node that sbatch or srun was given.
    LauncherSpec(
        Launcher.SLURM,
        Names("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", None),
        ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),
        node="SLURM_NODEID",
        nodes=("SLURM_STEP_NUM_NODES", "SLURM_NNODES"),
        tasks_per_node=("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"),
        tasks_on_each_node="SLURM_NTASKS_PER_NODE",
        job=(("SLURM_JOB_ID", "SLURM_JOBID"), ("SLURM_STEP_ID", "SLURM_STEPID")),
        job_format="SLURM job {} step {}",
        derives=True,
        hosts=SlurmHosts(
            ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"),
            "SLURM_DISTRIBUTION",
            "SLURM_HOSTFILE",
        ),
    ),
)
SPECS: Mapping[Launcher, LauncherSpec] = {spec.launcher: spec for spec in _TABLE}
"""Every launcher's entry, but :attr:`Launcher.NONE`'s: a plain process sets nothing."""
MPI_SPECS = tuple(spec for spec in _TABLE if spec.mpi)
"""The MPI flavours, in the order they are preferred when several are set."""


def names_for(launcher: Launcher) -> Names | None:
    """The rank variables of ``launcher``; None for a plain process."""
    spec = SPECS.get(launcher)
    return None if spec is None else spec.names
