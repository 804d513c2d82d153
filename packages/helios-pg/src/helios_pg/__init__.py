"""helios_pg."""
