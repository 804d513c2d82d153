"""Worker scripts for the collectives tests, run as separate processes."""
