"""Trials of whole jobs under the events clusters send them (``python -m tools.trials``)."""
