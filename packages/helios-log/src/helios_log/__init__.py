"""helios_log."""
