"""SGLang's mamba pool beside the KV pool (``handle_max_mamba_cache``, 0.5.6-0.5.23 wheels):
pinned to a public start of Qwen/Qwen3.5-9B on two RTX 4090 (SGLang dev build of 2026-04-14,
``--tp-size 2 --mem-fraction-static 0.8``), whose log prints every figure of the split:
"Load weight begin. avail mem=22.93 GB", "Load weight end. ... avail mem=14.08 GB",
"Mamba Cache is allocated. max_mamba_cache_size: 186, conv_state size: 0.10GB, ssm_state
size: 4.38GB", "KV Cache is allocated. #tokens: 327310, K size: 2.50 GB, V size: 2.50 GB"
(GB there are GiB), "max_total_num_tokens=327310, ..., max_running_requests=62"."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.errors import KvscopeError
from kvscope.plan import sglang_mamba
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.specs.config_parse import parse_config
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

CONFIG = Path(__file__).with_name("data") / "configs" / "qwen3.5-9b.json"
MODEL = load_model(str(CONFIG))
LAYERS = tuple(range(MODEL.num_layers))


def _engine(version: str | None = "0.5.10", **kw: object) -> EngineConfig:
    return EngineConfig(
        engine="sglang",
        engine_version=version,
        mem_fraction_static=0.8,
        max_model_len=262144,
        disable_custom_all_reduce=True,
        **kw,  # type: ignore[arg-type]
    )


def test_per_request_state_is_the_logged_pool_over_its_slots() -> None:
    # The pool holds max_mamba_cache_size + 1 slots (one padding slot): 187 x per_req.
    per_req = sglang_mamba.per_request_bytes(MODEL, LAYERS, 2)
    assert per_req * 187 / GIB == pytest.approx(0.10 + 4.38, abs=0.01)
    # Heads split over TP: one GPU alone holds twice the state.
    assert sglang_mamba.per_request_bytes(MODEL, LAYERS, 1) == 2 * per_req


def test_the_ratio_split_of_the_logged_rest() -> None:
    # rest = free after the weights - M0 x (1 - mfs), from the log's own figures.
    rest = (14.08 - 22.93 * (1 - 0.8)) * GIB
    per_req = sglang_mamba.per_request_bytes(MODEL, LAYERS, 2)
    size, kv = sglang_mamba.split(rest, per_req)
    # The log's 186: the free memory the engine measures at the profile is a little below
    # the 14.08 GiB printed after loading (each slot is 0.024 GiB).
    assert 185 <= size <= 187
    assert kv / GIB == pytest.approx(2.50 + 2.50, rel=0.01)
    assert size * per_req + kv == pytest.approx(rest)
    assert sglang_mamba.split(-1.0, per_req) == (0, -1.0)


def test_the_start_plans_within_two_percent() -> None:
    plan = plan_memory(MODEL, get_gpu("RTX-4090-24GB"), Parallelism(tp=2), _engine())
    assert plan.kv_tokens == pytest.approx(327_310, rel=0.02)


@pytest.mark.parametrize("version", ["0.5.3", "0.5.24"])
def test_releases_outside_the_checked_range_are_refused(version: str) -> None:
    with pytest.raises(KvscopeError, match="mamba pool"):
        plan_memory(MODEL, get_gpu("RTX-4090-24GB"), Parallelism(tp=2), _engine(version))


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
def test_speculative_decoding_is_refused(version: str) -> None:
    eng = _engine(version, speculative_layers=1, max_num_seqs=8)
    with pytest.raises(KvscopeError, match="speculative"):
        plan_memory(MODEL, get_gpu("RTX-4090-24GB"), Parallelism(tp=2), eng)


def test_a_config_without_mamba_ssm_dtype_keeps_sglang_state_in_float32() -> None:
    # SGLang's mamba2_state_dtype (srt/configs/mamba_utils.py, 0.5.9 wheel): float32 unless the
    # config or SGLANG_MAMBA_SSM_DTYPE names another; vLLM keeps such a config's state in the
    # model dtype. Qwen3-Next's config.json names none.
    import json

    raw = json.loads((CONFIG.parent / "qwen3-next-80b-a3b-instruct.json").read_text())
    assert "mamba_ssm_dtype" not in raw
    per_req = {}
    for name in (None, "float32", "bfloat16"):
        cfg = dict(raw) if name is None else {**raw, "mamba_ssm_dtype": name}
        model = parse_config(cfg, "qwen3-next.json")
        per_req[name] = sglang_mamba.per_request_bytes(model, tuple(range(model.num_layers)), 1)
    assert per_req[None] == per_req["float32"]
    assert per_req["bfloat16"] < per_req[None] < 2 * per_req["bfloat16"]


@settings(max_examples=200, deadline=None)
@given(
    rest=st.floats(min_value=1e8, max_value=2e11),
    per_req=st.integers(min_value=1 << 20, max_value=1 << 28),
)
def test_the_padding_slot_form_logs_one_slot_less_and_leaves_the_same_kv(
    rest: float, per_req: int
) -> None:
    # 0.5.17+ (kv_cache_configurator.py _handle_max_mamba_cache): K = (budget - p) // p and
    # the KV pool gets rest - (K + 1) p; 0.5.6-0.5.16: K = budget // p, rest - K p.
    old_size, old_kv = sglang_mamba.split(rest, per_req)
    new_size, new_kv = sglang_mamba.split(rest, per_req, padding_slot=True)
    if old_size == 0:
        return
    assert new_size == old_size - 1
    assert new_kv == pytest.approx(old_kv, abs=2.0)


def test_the_logged_start_under_the_0_5_17_form() -> None:
    # The 186 slots logged by the 2026-04-14 build; the 0.5.17+ solve counts the padding
    # slot inside the budget, so the same rest would log 185 and allocate the same 187.
    rest = (14.08 - 22.93 * (1 - 0.8)) * GIB
    per_req = sglang_mamba.per_request_bytes(MODEL, LAYERS, 2)
    old = sglang_mamba.split(rest, per_req)[0]
    assert sglang_mamba.split(rest, per_req, padding_slot=True)[0] == old - 1


def test_pipeline_stages_are_charged_the_whole_model_until_0_5_16() -> None:
    # Qwen3.5-9B: 24 of 32 layers are Gated DeltaNet, 12 on each of two stages. Up to 0.5.16
    # the split charges mamba_cache_per_req of every linear layer; from 0.5.17 the share of
    # the stage with most of them (pp_layer_scale = 12 / 24).
    stages = (tuple(range(16)), tuple(range(16, 32)))
    whole = sglang_mamba.per_request_bytes(MODEL, LAYERS, 1)
    assert sglang_mamba.charged_bytes(MODEL, stages, 1, (0, 5, 16)) == whole
    assert sglang_mamba.charged_bytes(MODEL, stages, 1, (0, 5, 17)) * 2 == whole
    uneven = (tuple(range(12)), tuple(range(12, 32)))  # 9 and 15 linear layers
    assert sglang_mamba.charged_bytes(MODEL, uneven, 1, (0, 5, 23)) * 24 == whole * 15


@pytest.mark.parametrize("version", ["0.5.15", "0.5.17", "0.5.23", None])
def test_later_releases_plan_the_logged_start_like_0_5_10(version: str | None) -> None:
    # Same default ratio (0.9) and the same bytes left for the KV pool at PP1 in every wheel
    # from 0.5.14 to 0.5.23; None is the planner's default release, which must stay modelled.
    # From 0.5.18 the multimodal reservation (kvscope.plan.sglang_mm_reserve) leaves the
    # split 100 MiB less, of which the KV pool loses 1 / 1.9, give or take one mamba slot.
    assert sglang_mamba.modelled(EngineConfig(engine="sglang").version)
    gpu, par = get_gpu("RTX-4090-24GB"), Parallelism(tp=2)
    base = plan_memory(MODEL, gpu, par, _engine()).kv_tokens
    eng = _engine(version)
    lost = base - plan_memory(MODEL, gpu, par, eng).kv_tokens
    if eng.version < (0, 5, 18):
        assert abs(lost) <= 1
        return
    per_req = sglang_mamba.per_request_bytes(MODEL, LAYERS, 2)
    assert abs(lost * 16_384 - (100 << 20) / 1.9) <= per_req


def test_running_requests_are_capped_by_the_logged_slots() -> None:
    # The log's max_running_requests=62 is its 186 slots // 3 (resolve_max_num_reqs: the
    # radix cache's no_buffer ratio at that build); the plan holds ~1 slot more than logged.
    assert 186 // sglang_mamba.slots_per_request((0, 5, 10), True, 1) == 62
    plan = plan_memory(MODEL, get_gpu("RTX-4090-24GB"), Parallelism(tp=2), _engine())
    assert abs(plan.max_num_seqs - 62) <= 1
    # A smaller --max-running-requests stands; without the radix cache a request holds one.
    small = plan_memory(MODEL, get_gpu("RTX-4090-24GB"), Parallelism(tp=2), _engine(max_num_seqs=8))
    assert small.max_num_seqs == 8
    eng = _engine(enable_prefix_caching=False)
    one = plan_memory(MODEL, get_gpu("RTX-4090-24GB"), Parallelism(tp=2), eng)
    assert 3 * plan.max_num_seqs <= one.max_num_seqs <= 3 * plan.max_num_seqs + 2


@pytest.mark.parametrize(
    ("version", "radix", "pp", "slots"),
    [
        ((0, 5, 6), True, 1, 3),  # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, no strategies
        ((0, 5, 13), True, 1, 3),  # auto -> no_buffer (server_args.py 0.5.8.post1-0.5.13)
        ((0, 5, 14), True, 1, 5),  # auto -> extra_buffer with overlap: 3 + 2 ping-pong slots
        ((0, 5, 23), True, 1, 5),  # get_mamba_tracking_slots(extra_buffer, overlap) = 2
        ((0, 5, 23), True, 2, 3),  # PP turns overlap off before auto resolves: no_buffer
        ((0, 5, 23), False, 1, 1),  # --disable-radix-cache
    ],
)
def test_slots_a_running_request_holds(
    version: tuple[int, ...], radix: bool, pp: int, slots: int
) -> None:
    assert sglang_mamba.slots_per_request(version, radix, pp) == slots
