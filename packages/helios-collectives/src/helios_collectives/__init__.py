"""helios_collectives."""
