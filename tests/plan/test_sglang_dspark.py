"""SGLang's DSpark drafting (--speculative-algorithm DSPARK) on DeepSeek-V4-Flash-0731.

The expected figures are transcribed from the sglang 0.5.16 wheel, independently of kvscope's
code: ``DSV4PoolConfigurator`` (srt/model_executor/pool_configurator.py) and
``_handle_dspark`` (srt/arg_groups/speculative_hook.py); see kvscope.plan.sglang_dspark.
"""

from __future__ import annotations

import math

import pytest
from tests.plan.log_cases import offline_hub

from kvscope.cli.spec_options import resolve_speculative
from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import from_sglang
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.registry import load_model

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"


def _model(name: str = MODEL):
    with offline_hub():
        return load_model(name)


def _plan(algorithm: str | None, version: str = "0.5.16", pp: int = 1, name: str = MODEL):
    model = _model(name)
    spec = (
        from_sglang(algorithm, deepseek_like=True, dspark_block_size=model.dspark_block_size)
        if algorithm
        else None
    )
    eng = EngineConfig(
        engine="sglang", engine_version=version, speculative=spec, mem_fraction_static=0.88
    )
    return plan_memory(model, get_gpu("H20"), Parallelism(tp=8 // pp, pp=pp), eng)


def _sglang_0516_bytes_per_full_token() -> float:
    """``_get_bytes_per_full_token`` for V4-Flash-0731's 43 target layers (the three DSpark
    entries of compress_ratios lie past ``end_layer``): 21 C4 and 20 C128 layers, rings of 16
    rows under speculative decoding, then x (T + 1) / T."""
    n, n4, n128 = 43, 21, 20
    kv = 448 + 64 * 2 + 8  # qk_nope + 2 x qk_rope + 8
    indexer = 128 + 128 // 128 * 4
    c4_state, c4_indexer_state = 2 * 2 * 512 * 4, 2 * 2 * 128 * 4
    swa, ring = 0.1, 16 / 128
    bpft = (
        swa * kv * n
        + kv * n4 / 4
        + kv * n128 / 128
        + indexer * n4 / 4
        + swa * ring * (c4_state + c4_indexer_state) * n4
    )
    return bpft * (n + 1) / n


def test_dspark_prices_the_v4_pool_as_sglang_0516_does() -> None:
    plan = _plan("DSPARK")
    bpft = _sglang_0516_bytes_per_full_token()
    # SGLang logs it to two places: "DSV4 memory calculation: bytes_per_full_token=9259.90"
    assert round(bpft, 2) == 9259.90
    assert plan.kv_bytes_per_token == pytest.approx(bpft, abs=1e-6)
    # c128 state of max_running_requests 256 (the V4 default; DSpark's 48 never applies):
    # (257 x 256 + 256 + 1) rows rounded up to 128, 2 x 512 fp32 a row, 20 C128 layers
    c128 = math.ceil((257 * 256 + 256 + 1) / 128) * 128 * 2 * 512 * 4 * 20
    assert c128 == 5_421_137_920
    available = (plan.budget_gib - plan.weights_gib) * GIB
    want = int((available - c128) / bpft) // 256 * 256
    assert plan.kv_tokens == want


def test_dspark_counts_its_three_stages_before_the_pool() -> None:
    # same pool price as EAGLE (one NextN layer), but the draft worker's three target-shaped
    # stages, main_proj and Markov head load before init_memory_pools sizes the pool
    base, eagle, dspark = _plan(None), _plan("EAGLE"), _plan("DSPARK")
    assert dspark.kv_bytes_per_token == eagle.kv_bytes_per_token > base.kv_bytes_per_token
    heads = dspark.speculative["drafter_weights_gib"]
    # no vLLM context_wkv_proj: main_proj (4096 x 12288 fp8 + block scales) and the Markov
    # head's two bf16 tables of 129,280 x 256 are what rides on every rank
    assert heads * GIB == pytest.approx(
        4096 * 12288 * (1 + 4 / 128**2) + 2 * 129_280 * 256 * 2, rel=1e-6
    )
    # each stage: the NextN layer without its eh_proj (2 x 4096 x 4096 fp8, whole); both are
    # the last layer's shape without the C4 compressor and indexer, which neither
    # DSparkAttention (compress_ratio=0, deepseek_v4_dspark.py 0.5.16-0.5.23) nor the NextN
    # layer (COMPRESS_RATIO_NEXTN_LAYER = 0) builds: 19,142,272 fp8 parameters (test_dspark.py)
    nextn = eagle.weights_gib - base.weights_gib
    eh_proj = 2 * 4096 * 4096 * (1 + 4 / 128**2) / GIB
    stage = (dspark.weights_gib - base.weights_gib - heads) / 3
    assert stage == pytest.approx(nextn - eh_proj, abs=1e-4)
    assert dspark.kv_tokens < eagle.kv_tokens


def test_dspark_gamma_follows_the_checkpoint_or_the_flag() -> None:
    model = _model()
    spec = resolve_speculative("sglang", None, "DSPARK", model=model)
    assert spec is not None
    assert (spec.method, spec.num_speculative_tokens, spec.verify_tokens) == ("dspark", 5, 6)
    spec = from_sglang("DSPARK", num_draft_tokens=8, dspark_block_size=5)
    assert (spec.num_speculative_tokens, spec.verify_tokens, spec.model) == (7, 8, None)
    assert from_sglang("DSPARK").num_speculative_tokens == 7  # DEFAULT_DSPARK_GAMMA
    with pytest.raises(KvscopeError, match="at least 2"):
        from_sglang("DSPARK", num_draft_tokens=1)


@pytest.mark.parametrize(
    ("version", "pp", "name", "says"),
    [
        ("0.5.15", 1, MODEL, "arrived in 0.5.16"),
        ("0.5.16", 2, MODEL, "--pipeline-parallel-size 1"),
        ("0.5.16", 1, "deepseek-ai/DeepSeek-V4-Flash", "dspark_target_layer_ids"),
        ("0.5.23", 1, "deepseek-ai/DeepSeek-V4.1-Flash", "not for deepseek-ai/DeepSeek-V4.1"),
    ],
)
def test_dspark_refused_in_one_line(version: str, pp: int, name: str, says: str) -> None:
    with pytest.raises(KvscopeError, match=says) as err:
        _plan("DSPARK", version, pp, name)
    assert "\n" not in str(err.value)
