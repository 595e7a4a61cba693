"""Signals read what telemetry really writes, and name what exporters really expose."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.alerts.signals import SIGNALS, signal
from kvscope.errors import UnknownNameError
from kvscope.telemetry.catalogue import lookup
from kvscope.telemetry.engine import EngineScraper
from kvscope.telemetry.gpu import GpuSampler
from kvscope.telemetry.kv_events.live import KvEventsLive
from kvscope.telemetry.nvml import Nvml
from kvscope.telemetry.nvml_replay import load_recording, replay_call

FIX = Path(__file__).parents[1] / "telemetry" / "fixtures"
#: Signals no kvscope sampler writes yet (fed by memtrace / a KV-block sampler later).
NOT_YET_SAMPLED = {"kv_fragmentation_ratio", "allocation_retries_total"}


def _emitted() -> set[str]:
    gpus = GpuSampler(Nvml.open(raw=replay_call(load_recording(FIX / "nvml_recording.json"))))
    names = {s.metric for s in gpus.sample(0.0)}
    for page in ("vllm_0_33_0_metrics_t1.txt", "vllm_0_33_0_metrics_t2.txt"):
        text = (FIX / page).read_text()
        scraper = EngineScraper("http://127.0.0.1:1", fetch=lambda _u, _t, text=text: text)
        names |= {s.metric for s in scraper.sample(0.0)}
    names |= {s.metric for s in KvEventsLive(()).sample(0.0)}  # watch --kv-events
    return names


def test_store_metrics_are_what_samplers_write() -> None:
    emitted = _emitted()
    for sig in SIGNALS:
        for m in sig.store_metrics:
            assert m in emitted or m in NOT_YET_SAMPLED, (sig.name, m)


def test_families_use_exporter_and_catalogue_names() -> None:
    for sig in SIGNALS:
        kv = sig.families["kvscope"].selector
        assert kv.startswith("kvscope_" + sig.store_metric), sig.name
        assert sig.counter == sig.store_metric.endswith("_total")
        for family in ("vllm", "sglang"):
            fe = sig.families.get(family)
            if fe is not None and fe.rangeable:
                entry = lookup(fe.selector)
                assert entry is not None and (entry.kind == "counter") == sig.counter, fe


def test_unknown_signal_suggests() -> None:
    with pytest.raises(UnknownNameError) as exc:
        signal("kv_cache_usage")
    assert "Did you mean: kv_cache_usage_ratio" in exc.value.one_line()
