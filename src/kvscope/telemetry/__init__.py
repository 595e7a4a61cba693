"""Telemetry: samplers (NVML, engine ``/metrics``, nvidia-smi logs), store, exporter, analysis.

- :mod:`~kvscope.telemetry.nvml` -- the only module that calls NVML (one swappable raw call).
- :mod:`~kvscope.telemetry.gpu` -- NVML readings to samples in base units; throttle decoding.
- :mod:`~kvscope.telemetry.catalogue` / :mod:`~kvscope.telemetry.metrics_page` /
  :mod:`~kvscope.telemetry.engine` -- engine metric names across vLLM, SGLang and llama.cpp
  versions; one page mapped to them; scraping over time, rates and windowed percentiles.
- :mod:`~kvscope.telemetry.dmon` -- ``nvidia-smi dmon`` and ``--query-gpu`` CSV logs.
- :mod:`~kvscope.telemetry.waveform` -- peak, trough, period, phase, Theil-Sen leak slope.
- :mod:`~kvscope.telemetry.store` -- DuckDB store, retention, export.
- :mod:`~kvscope.telemetry.exporter` -- scrape-time Prometheus collector and HTTP server.
- :mod:`~kvscope.telemetry.watch` -- the ``kvscope watch`` loop and its run directory.

Import the submodules directly; this package imports nothing heavy on its own.
"""
