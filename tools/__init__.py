"""Workspace tools, each run as ``uv run python -m tools.NAME`` from the repository root."""
