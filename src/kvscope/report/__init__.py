"""Self-contained HTML reports of run directories (works offline: inline SVG, no scripts)."""

from kvscope.report.page import build_report, write_report

__all__ = ["build_report", "write_report"]
