"""The main job, ``python -m helios_collectives``: a check and benchmark of a setup.

``cli`` parses the options and prints the report, ``verify`` checks every collective's
result against values computed locally, ``sweep`` times all-reduce and all-gather over
message sizes, ``sizes`` parses and prints byte counts, and ``objects`` moves small
Python values between ranks without numpy. Nothing here is public API.
"""
