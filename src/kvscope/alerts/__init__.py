"""Alerts: tiered, schedule-aware rules evaluated in kvscope and exported to Prometheus.

- :mod:`~kvscope.alerts.model` -- rule, tier, schedule records (frozen dataclasses).
- :mod:`~kvscope.alerts.loader` -- YAML rule files via pydantic; the default pack.
- :mod:`~kvscope.alerts.signals` -- what rules watch, in the store and under real names.
- :mod:`~kvscope.alerts.promql` -- PromQL-exact window functions used by the evaluator.
- :mod:`~kvscope.alerts.evaluate` -- deterministic replay over a store; live evaluation.
- :mod:`~kvscope.alerts.actions` -- log line, webhook POST, command.
- :mod:`~kvscope.alerts.live` -- the ``watch --rules`` hook (live evaluation + actions).
- :mod:`~kvscope.alerts.export` -- Prometheus rule files and PrometheusRule CRDs.
- :mod:`~kvscope.alerts.scenarios` -- synthetic series with known answers; promtool tests.
- :mod:`~kvscope.alerts.dashboard` -- Grafana dashboard JSON.
"""
