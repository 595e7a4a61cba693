"""Self-contained HTML reports of run directories (works offline: Vega-Lite inlined)."""

from kvscope.report.page import build_report, write_report

__all__ = ["build_report", "write_report"]
