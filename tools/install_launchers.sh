#!/usr/bin/env bash
# Install the real launchers the `launchers` tests run: SLURM (slurmctld, slurmd, srun)
# with munge, Open MPI, MPICH and PMIx. Debian/Ubuntu only; idempotent: installs
# nothing when every command is already present. Needs root (or passwordless sudo).
#
#   bash tools/install_launchers.sh
set -euo pipefail

packages=(slurm-wlm munge openmpi-bin mpich libpmix-dev)
commands=(srun slurmctld slurmd munged mpirun.openmpi mpirun.mpich)

missing=()
for command in "${commands[@]}"; do
    if ! command -v "$command" >/dev/null 2>&1; then
        missing+=("$command")
    fi
done
# libpmix-dev has no command; srun --mpi=pmix needs its library.
if ! ls /usr/lib/*/libpmix.so* >/dev/null 2>&1; then
    missing+=("libpmix")
fi
if [ "${#missing[@]}" -eq 0 ]; then
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_launchers.sh: apt-get not found; install ${packages[*]} by hand" >&2
    exit 1
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        echo "install_launchers.sh: not root and no sudo; cannot install ${packages[*]}" >&2
        exit 1
    fi
    sudo=(sudo -n)
fi

echo "install_launchers.sh: missing ${missing[*]}; installing ${packages[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! { "${sudo[@]}" apt-get update -qq \
    && "${sudo[@]}" apt-get install -y -qq \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${packages[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    echo "install_launchers.sh: apt-get failed" >&2
    exit 1
fi

still=()
for command in "${commands[@]}"; do
    command -v "$command" >/dev/null 2>&1 || still+=("$command")
done
if [ "${#still[@]}" -ne 0 ]; then
    echo "install_launchers.sh: still missing after install: ${still[*]}" >&2
    exit 1
fi
