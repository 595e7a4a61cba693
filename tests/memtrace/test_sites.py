"""Top allocation sites, named by their first user frame."""

from __future__ import annotations

from pathlib import Path

from kvscope.memtrace.analysis import analyze
from kvscope.memtrace.columns import Frames
from kvscope.memtrace.load import load_snapshot
from kvscope.memtrace.sites import is_internal, site_table


def test_internal_frames() -> None:
    assert is_internal(("??", 0, "c10::cuda::CUDACachingAllocator::malloc"))
    assert is_internal(("/x/site-packages/torch/nn/modules/module.py", 1, "_apply"))
    assert is_internal(("<frozen runpy>", 88, "_run_code"))
    assert not is_internal(("vllm/worker/cache_engine.py", 89, "_allocate_kv_cache"))


def test_site_skips_allocator_and_torch_frames() -> None:
    fr = Frames(
        frames=[
            ("??", 0, "at::empty_cuda"),
            ("torch/nn/modules/module.py", 1, "_apply"),
            ("model.py", 3, "load"),
        ],
        stacks=[(0, 1, 2), (0, 1)],
    )
    t = site_table(fr)
    assert [t.labels[s] for s in t.site_of_stack.tolist()] == [
        "model.py:3:load",
        "??:0:at::empty_cuda",
    ]


def test_steady_top_sites(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["steady"])[0], top=3)
    assert len(r.top_sites_by_bytes) == 3
    assert r.top_sites_by_bytes[0].site == (
        "vllm/model_executor/layers/activation.py:84:forward_cuda"
    )
    by_count = {s.site: s.count for s in r.top_sites_by_count}
    # 300 steps x 3..9 activations, about half of them attention temporaries
    assert sum(by_count.values()) > 300 * 3
    kv = next(s for s in r.top_sites_by_bytes if "cache_engine" in s.site)
    assert kv.count == 1 and kv.bytes == kv.live_at_end_bytes == 8 << 30


def test_categories(snaps: dict[str, Path]) -> None:
    r = analyze(load_snapshot(snaps["steady"])[0])
    cats = {c.category: c for c in r.categories}
    assert cats["weights"].count == 8 and cats["weights"].by_keyword == 8
    assert cats["kv_cache"].live_at_end_bytes == 8 << 30
    assert cats["communication"].count == 300 // 8  # one all-reduce buffer every 8 steps
    assert cats["communication"].live_at_end_bytes == 0
    assert cats["activations"].live_at_end_bytes == 0
    assert cats["activations"].by_lifetime == cats["activations"].count
