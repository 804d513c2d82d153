"""Worker scripts that the launcher tests start under real srun, sbatch and mpirun."""
