"""Workspace scripts: the CI matrix, the wheel isolation check, benchmarks, fault scenarios."""
