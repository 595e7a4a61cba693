"""Trace loaders, one module per public trace format, plus content-based format detection.

Each loader turns a file into a :class:`~kvscope.workload.stream.Workload` with its clock
shifted so the first request arrives at t = 0 s, and records what it read (format, path,
rows skipped or set apart) in the workload's ``spec``.
"""

FORMATS = ("azure", "burstgpt", "mooncake", "weka", "sharegpt", "kvscope")
