"""Worker scripts that the helios-pg tests start as real processes."""
