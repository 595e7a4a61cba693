"""The Grafana dashboard: names checked against the catalogue; every query run on a real
Prometheus scraping real pages (recorded vLLM 0.33.0, SGLang, dcgm-exporter names and
kvscope's own exporter) over loopback."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kvscope.alerts.dashboard import PANELS, dashboard, queries
from kvscope.alerts.export import rule_expr, rule_file
from kvscope.alerts.loader import load_pack
from kvscope.telemetry.catalogue import lookup
from kvscope.telemetry.exporter import Exporter, LatestValues
from kvscope.telemetry.series import Sample

FIXTURES = Path(__file__).parents[1] / "telemetry" / "fixtures"
NAME = re.compile(r"\b((?:vllm|sglang):[a-z_:]+|DCGM_FI_[A-Z_]+)")
#: dcgm-exporter default counters (etc/default-counters.csv) the dashboard and rules use.
DCGM_DEFAULT = {
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_GPU_TEMP",
}


def _engine_names(text: str) -> set[str]:
    return set(NAME.findall(text))


def test_every_engine_name_is_in_the_catalogue() -> None:
    names = set()
    for q in queries():
        names |= _engine_names(q)
    pack = load_pack()
    for r in pack.rules:
        names |= _engine_names(rule_expr(r, pack))
    assert names, "no engine names found"
    for n in sorted(names):
        if n.startswith("DCGM_"):
            assert n in DCGM_DEFAULT, n
        else:
            assert lookup(n.removesuffix("_bucket")) is not None, n


def test_dashboard_covers_the_issue_list() -> None:
    titles = " ".join(p.title for p in PANELS).lower()
    for topic in (
        "kv cache usage",
        "peak",
        "preemptions",
        "prefix",
        "ttft",
        "inter-token",
        "gpu memory",
        "power",
        "clocks",
        "leak slope",
    ):
        assert topic in titles, topic
    doc = dashboard()
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) == len(PANELS)
    assert all(t["expr"] and "$__" not in t["expr"] for p in doc["panels"] for t in p["targets"])
    json.dumps(doc)


_DCGM_LABELS = (
    'gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",hostname="n1"'
)
_DCGM_VALUES = {
    "DCGM_FI_DEV_FB_USED": "{used}",
    "DCGM_FI_DEV_FB_FREE": "{free}",
    "DCGM_FI_DEV_POWER_USAGE": "412.5",
    "DCGM_FI_DEV_SM_CLOCK": "1980",
    "DCGM_FI_DEV_MEM_CLOCK": "2619",
    "DCGM_FI_DEV_GPU_TEMP": "61",
}
#: A dcgm-exporter page: default-counters names, its label set, FB in MiB.
DCGM_PAGE = "".join(
    f"# TYPE {n} gauge\n{n}{{{{{_DCGM_LABELS}}}}} {v}\n" for n, v in _DCGM_VALUES.items()
)


class Pages:
    """Loopback server: /vllm (recorded t1, then t2), /sglang, /dcgm (memory creeping up)."""

    def __init__(self) -> None:
        self.hits: dict[str, int] = {}
        vllm = [(FIXTURES / f"vllm_0_33_0_metrics_t{i}.txt").read_text() for i in (1, 2)]
        sglang = (FIXTURES / "sglang_metrics.txt").read_text()
        owner = self

        def body(path: str) -> str | None:
            n = owner.hits.get(path, 0)
            if path == "/vllm":
                return vllm[min(n // 2, 1)]
            if path == "/sglang":
                return sglang
            if path == "/dcgm":
                used = 60000 + 50 * n
                return DCGM_PAGE.format(used=used, free=81559 - used)
            return None

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                text = body(self.path)
                if text is None:
                    self.send_error(404)
                    return
                owner.hits[self.path] = owner.hits.get(self.path, 0) + 1
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _kvscope_board(t: float, k: int) -> list[Sample]:
    g, e = "gpu:0", "engine:127.0.0.1:8000"
    out = [
        Sample(t, g, "gpu_memory_used_bytes", 60e9 + 1e6 * k),
        Sample(t, g, "gpu_memory_total_bytes", 80e9),
        Sample(t, g, "gpu_power_watts", 400.0),
        Sample(t, g, "gpu_power_limit_watts", 700.0),
        Sample(t, g, "gpu_sm_clock_hertz", 1.98e9),
        Sample(t, g, "gpu_memory_clock_hertz", 2.619e9),
        Sample(t, g, "gpu_temperature_celsius", 61.0),
        Sample(t, g, "gpu_clock_event_active", 1.0, "reason=hw_thermal_slowdown"),
        Sample(t, g, "gpu_clock_event_active", 0.0, "reason=gpu_idle"),
        Sample(t, g, "gpu_xid_events_total", 0.0),
        Sample(t, e, "engine_up", 1.0),
        Sample(t, e, "kv_cache_usage_ratio", 0.5 + 0.01 * k),
        Sample(t, e, "kv_fragmentation_ratio", 0.1),
        Sample(t, e, "preemptions_total", 3.0 * k),
        Sample(t, e, "allocation_retries_total", float(k)),
        Sample(t, e, "prefix_cache_hit_ratio", 0.4),
        Sample(t, e, "requests_running", 12.0),
        Sample(t, e, "requests_waiting", float(k)),
    ]
    for q in (50, 90, 99):
        out.append(Sample(t, e, f"ttft_seconds_p{q}", 0.1 * q / 50))
        out.append(Sample(t, e, f"itl_seconds_p{q}", 0.01 * q / 50))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return dict(json.load(resp))
    except urllib.error.HTTPError as err:  # 400 on a bad query carries a JSON body
        return dict(json.load(err))


@pytest.fixture(scope="module")
def prometheus(prometheus_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("prom")
    pages = Pages()
    board = LatestValues()
    board.update(_kvscope_board(time.time(), 0))
    exporter = Exporter.start(board, 0)
    (tmp / "rules.yml").write_text(rule_file(load_pack()))
    jobs = {"vllm": "/vllm", "sglang": "/sglang", "dcgm": "/dcgm"}
    scrape = [
        {
            "job_name": j,
            "metrics_path": p,
            "static_configs": [{"targets": [f"127.0.0.1:{pages.port}"]}],
        }
        for j, p in jobs.items()
    ]
    scrape.append(
        {"job_name": "kvscope", "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]}
    )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "rules.yml")],
        "scrape_configs": scrape,
    }
    (tmp / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = _free_port()
    proc = subprocess.Popen(
        [
            prometheus_bin,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp / "prometheus.log", "w"),  # noqa: SIM115 - closed with the process
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        k = 0
        while time.monotonic() < deadline:
            k += 1
            board.update(_kvscope_board(time.time(), k))
            try:
                r = _get(
                    base
                    + "/api/v1/query?query="
                    + urllib.parse.quote("min(count_over_time(up[1m]))")
                )
                res = r["data"]["result"]
                if (
                    res
                    and float(res[0]["value"][1]) >= 4
                    and len(_get(base + "/api/v1/targets")["data"]["activeTargets"]) == 4
                ):
                    break
            except (OSError, KeyError, ValueError):
                pass
            time.sleep(0.5)
        else:
            pytest.fail(
                "prometheus did not collect 4 scrapes of every target in 30 s: "
                + (tmp / "prometheus.log").read_text()[-2000:]
            )
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        exporter.stop()
        pages.close()


def _query(base: str, expr: str) -> dict[str, Any]:
    return _get(base + "/api/v1/query?query=" + urllib.parse.quote(expr))


@pytest.mark.integration
def test_every_dashboard_query_runs_and_returns_data(prometheus: str) -> None:
    empty = []
    for expr in queries():
        r = _query(prometheus, expr)
        assert r["status"] == "success", (expr, r)
        if not r["data"]["result"] and "ALERTS" not in expr:
            empty.append(expr)
    assert not empty, f"queries with no data: {empty}"
    end = time.time()
    for expr in queries():
        params = urllib.parse.urlencode({"query": expr, "start": end - 60, "end": end, "step": 5})
        r = _get(prometheus + "/api/v1/query_range?" + params)
        assert r["status"] == "success", (expr, r)


@pytest.mark.integration
def test_each_source_family_answers(prometheus: str) -> None:
    """The unions really draw on every family: per-job results, not only kvscope's."""
    kv = next(q.expr for p in PANELS if p.title.startswith("KV cache usage (") for q in p.queries)
    jobs = {s["metric"].get("job") for s in _query(prometheus, kv)["data"]["result"]}
    assert {"vllm", "sglang", "kvscope"} <= jobs
    mem = next(q.expr for p in PANELS if p.title == "GPU memory used" for q in p.queries)
    jobs = {s["metric"].get("job") for s in _query(prometheus, mem)["data"]["result"]}
    assert {"dcgm", "kvscope"} <= jobs
    leak = next(q.expr for p in PANELS if p.title == "GPU memory leak slope" for q in p.queries)
    values = {
        s["metric"].get("job"): float(s["value"][1])
        for s in _query(prometheus, leak)["data"]["result"]
    }
    assert values["dcgm"] > 0 and values["kvscope"] > 0  # both memories creep up


@pytest.mark.integration
def test_rules_load_and_every_rule_expression_runs(prometheus: str) -> None:
    groups = _get(prometheus + "/api/v1/rules")["data"]["groups"]
    names = {r["name"] for g in groups for r in g["rules"]}
    pack = load_pack()
    assert {r.name for r in pack.rules} <= names
    assert all(r["health"] != "err" for g in groups for r in g["rules"])
    for r in pack.rules:
        res = _query(prometheus, rule_expr(r, pack))
        assert res["status"] == "success", (r.name, res)
