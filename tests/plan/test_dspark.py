"""vLLM's DSpark drafter on DeepSeek V4 checkpoints that ship its stages (V4-Flash-0731)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from tests.plan.log_cases import offline_hub

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.drafter import Drafter, aux_capture_layers, plan_drafter
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import parse_vllm
from kvscope.plan.weights import RankWeights
from kvscope.specs.hardware import GIB, get_gpu
from kvscope.specs.model import ModelSpec
from kvscope.specs.registry import load_model

DSPARK = '{"method": "dspark", "num_speculative_tokens": 5}'


def test_dspark_is_accepted_as_vllm_names_it() -> None:
    spec = parse_vllm(DSPARK)
    assert (spec.method, spec.model, spec.num_speculative_tokens) == ("dspark", None, 5)


def test_dspark_stages_of_the_0731_checkpoint() -> None:
    # config.json of V4-Flash-0731: three dspark_target_layer_ids, no n_mtp_layers (vLLM: 3).
    # main_proj 4096 x (3 x 4096) and context_wkv_proj 4096 -> 3 x 512 = 56,623,104 params,
    # fp8 with one fp32 scale per 128 x 128 block: 56,636,928 B on every rank; the Markov head
    # (dspark_markov_rank 256) is two bf16 tables of 129,280 x 256: 132,382,720 B.
    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    d = plan_drafter(model, parse_vllm(DSPARK), Parallelism(tp=8))
    assert (d.mtp_layers, d.kv_layers, d.lookahead_tokens) == (3, 3, 5)
    assert d.extra_weight_bytes == pytest.approx(56_636_928 + 132_382_720, abs=1)
    eng = EngineConfig(engine="vllm", engine_version="0.31.0", max_model_len=262144)
    base = plan_memory(model, get_gpu("H100"), Parallelism(tp=8), eng)
    eng_spec = EngineConfig(
        engine="vllm", engine_version="0.31.0", max_model_len=262144, speculative=parse_vllm(DSPARK)
    )
    drafted = plan_memory(model, get_gpu("H100"), Parallelism(tp=8), eng_spec)
    # three target-shaped V4 layers (attention + 256-expert MoE, split over 8 ranks) and the
    # replicated projections: more than one MTP layer's share, less than a tenth of the model
    assert 1.0 < drafted.weights_gib - base.weights_gib < 0.1 * base.weights_gib
    assert drafted.kv_tokens < base.kv_tokens


@pytest.mark.parametrize(
    ("model", "config", "says"),
    [
        ("deepseek-ai/DeepSeek-V4-Flash", DSPARK, "dspark_target_layer_ids"),
        (
            "deepseek-ai/DeepSeek-V4-Flash-0731",
            '{"method": "dspark", "model": "org/dspark-qwen3-8b", "num_speculative_tokens": 7}',
            "separate DSpark draft checkpoint",
        ),
    ],
)
def test_dspark_refused_in_one_line(model: str, config: str, says: str) -> None:
    with offline_hub():
        m = load_model(model)
    with pytest.raises(KvscopeError, match=says):
        plan_drafter(m, parse_vllm(config), Parallelism(tp=8))


def _c4_priced(
    monkeypatch: pytest.MonkeyPatch, model: ModelSpec, par: Parallelism, n: int, eh_proj: bool
) -> RankWeights:
    """The last stage with ``n`` drafter layers priced as the target's last (C4) layer: the
    window-only rule switched off, on a fresh copy (rank_weights caches per model object)."""
    from kvscope.plan import weights

    with monkeypatch.context() as m:
        m.setattr(weights, "window_only_attention", lambda att: att)
        return weights.all_stage_weights(
            replace(model), par, n, weights.ExpertLayout(), 0, eh_proj
        )[-1]


def test_dspark_stages_are_window_only_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM (vllm/models/deepseek_v4/attention.py, 0.25.0-0.31.0): a layer numbered from
    num_hidden_layers gets compress_ratio 1, so a stage builds no compressor or indexer; SGLang's
    DSparkAttention (compress_ratio=0) neither. V4-Flash-0731's last layer is C4; what a stage
    leaves out of it: the compressor (fused_wkv_wgate 4096 -> 2 x 2 x 512, ape 4 x 1024, norm
    512) and the indexer (wq_b 1024 -> 64 x 128, weights_proj 4096 -> 64, its compressor
    4096 -> 2 x 2 x 128, ape 4 x 256, norm 128): 19,142,272 parameters, replicated, fp8."""
    from kvscope.plan.loaded_weights import loaded_stage_weights
    from kvscope.plan.weights import ExpertLayout, all_stage_weights, window_only_attention

    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    last = model.layers[-1].attention
    assert (last.kind, last.compress_ratio) == ("dsv4_csa", 4)
    compressor = 4096 * 2048 + 4 * 1024 + 512
    indexer = 1024 * 64 * 128 + 4096 * 64 + 4096 * 512 + 4 * 256 + 128
    assert compressor + indexer == 19_142_272
    stage = window_only_attention(last)
    assert (stage.kind, stage.num_params()) == ("dsv4_swa", last.num_params() - 19_142_272)
    par = Parallelism(tp=8)
    d = plan_drafter(model, parse_vllm(DSPARK), par)
    eng = EngineConfig(engine="vllm", engine_version="0.30.1")

    loaded = loaded_stage_weights(model, par, eng, ExpertLayout(), d, 3)[-1]
    c4_priced = _c4_priced(monkeypatch, model, par, 3, False)
    window = all_stage_weights(model, par, 3, ExpertLayout(), 0, False)[-1]
    dropped = c4_priced.total_bytes - window.total_bytes
    assert dropped == pytest.approx(3 * 19_142_272 * (1 + 4 / 128**2), rel=1e-9)
    assert loaded.by_component["attention"] == window.by_component["attention"]
    # V4.1's last layer is neither a kv nor an index source: its stages keep its price
    with offline_hub():
        v41 = load_model("deepseek-ai/DeepSeek-V4.1-Flash")
    assert window_only_attention(v41.layers[-1].attention) == v41.layers[-1].attention
    source = next(ly.attention for ly in v41.layers if ly.attention.kv_source)
    assert window_only_attention(source).num_params() < source.num_params()


def test_v4_mtp_layers_are_window_only_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM numbers the MTP layer past num_hidden_layers (models/deepseek_v4/nvidia/mtp.py)
    and gives such a layer compress_ratio 1 (nvidia/model.py of 0.22.0: "MTP layer is not
    included in the compress ratio list"); SGLang's NextN layer has compress ratio 0. So an
    MTP drafter on V4 prices its layer without the last layer's compressor and indexer, as a
    DSpark stage does."""
    from kvscope.plan.loaded_weights import loaded_stage_weights
    from kvscope.plan.weights import ExpertLayout, all_stage_weights

    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    par = Parallelism(tp=8)
    mtp = plan_drafter(model, parse_vllm('{"method": "mtp", "num_speculative_tokens": 1}'), par)
    assert mtp.mtp_layers == 1
    eng = EngineConfig(engine="vllm", engine_version="0.25.0")

    def last_rank(drafter: Drafter | None) -> float:
        return loaded_stage_weights(model, par, eng, ExpertLayout(), drafter, 1)[-1].total_bytes

    assert last_rank(mtp) == last_rank(None)
    c4_priced = _c4_priced(monkeypatch, model, par, 1, True)
    window = all_stage_weights(model, par, 1, ExpertLayout(), 0, True)[-1]
    assert (
        loaded_stage_weights(model, par, eng, ExpertLayout(), mtp, 1)[-1].by_component["attention"]
        == window.by_component["attention"]
        < c4_priced.by_component["attention"]
    )


def test_dspark_weights_sit_on_every_rank() -> None:
    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    one = plan_drafter(model, parse_vllm(DSPARK), Parallelism(tp=1)).extra_weight_bytes
    eight = plan_drafter(model, parse_vllm(DSPARK), Parallelism(tp=8)).extra_weight_bytes
    assert one == eight < 0.18 * GIB


def test_sglang_dspark_refused_before_it_existed() -> None:
    # SGLang drafts DSpark from 0.5.16 (kvscope.plan.sglang_dspark, test_sglang_dspark.py)
    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    eng = EngineConfig(engine="sglang", engine_version="0.5.15", speculative=parse_vllm(DSPARK))
    with pytest.raises(KvscopeError, match="has no DSpark drafting"):
        plan_memory(model, get_gpu("H200"), Parallelism(tp=4), eng)


@pytest.mark.parametrize(("version", "extra_mib"), [("0.26.0", 256.0), ("0.27.0", 272.0)])
def test_dspark_buffers_by_release(version: str, extra_mib: float) -> None:
    """At T = 8192: the residual-stream copy 8192 x 4 x 4096 bf16 (256 MiB) from every
    release, the drafter's own top-k buffer 8192 x 512 int32 (16 MiB) from 0.27.0."""
    from kvscope.plan.dsv4_buffers import dsv4_buffer_bytes

    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    base = EngineConfig(engine="vllm", engine_version=version)
    drafted = EngineConfig(engine="vllm", engine_version=version, speculative=parse_vllm(DSPARK))
    topk = 8192 * 512 * 4.0
    if version >= "0.27.0":  # the residual copy is kept without drafting before 0.27 only
        assert dsv4_buffer_bytes(model, base, 8192, True) == topk
    got = dsv4_buffer_bytes(model, drafted, 8192, True) - topk
    assert got == extra_mib * (1 << 20)


@pytest.mark.parametrize(
    ("version", "sample", "want"),
    [
        ("0.25.0", "probabilistic", 0),  # memory_profiling does not count them before 0.27
        ("0.27.0", "probabilistic", 8192 * 4096 * 2 + 64 * 5 * 129_280 * 4),  # fp32 logits
        ("0.30.1", "probabilistic", 8192 * 4096 * 2 + 64 * 5 * 129_280 * 2),  # head dtype
        ("0.30.1", "greedy", 8192 * 4096 * 2),  # no cached proposal distribution
    ],
)
def test_dspark_speculator_buffers(version: str, sample: str, want: int) -> None:
    """V4-Flash-0731 (hidden 4096, vocab 129,280, bf16) at 8,192 batched tokens, 64
    sequences, k = 5: the speculator's hidden-state copy and cached draft logits."""
    from kvscope.plan.spec_buffers import dspark_speculator_bytes

    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    cfg = f'{{"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "{sample}"}}'
    eng = EngineConfig(engine="vllm", engine_version=version, speculative=parse_vllm(cfg))
    assert dspark_speculator_bytes(model, eng, 64, 8192) == want
    mtp = EngineConfig(
        engine="vllm",
        engine_version=version,
        speculative=parse_vllm('{"method": "mtp", "num_speculative_tokens": 1}'),
    )
    assert dspark_speculator_bytes(model, mtp, 64, 8192) == 0


def test_dspark_probabilistic_logits_come_off_the_pool() -> None:
    # the same 0.30.1 start with probabilistic and greedy drafting differs by the cached
    # logits only: 64 x 5 x 129,280 bf16 = 82,739,200 B a rank
    with offline_hub():
        model = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
    kv = {}
    for sample in ("probabilistic", "greedy"):
        cfg = f'{{"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "{sample}"}}'  # noqa: E501
        eng = EngineConfig(
            engine="vllm",
            engine_version="0.30.1",
            speculative=parse_vllm(cfg),
            max_model_len=262_144,
            max_num_seqs=64,
        )
        kv[sample] = plan_memory(model, get_gpu("H100"), Parallelism(tp=8, ep=True), eng)
    diff = (kv["greedy"].kv_cache_gib - kv["probabilistic"].kv_cache_gib) * GIB
    assert diff == pytest.approx(64 * 5 * 129_280 * 2, rel=1e-9)


def test_dspark_captures_follow_vllms_layer_id_semantics() -> None:
    # get_eagle3_aux_layers_from_config (0.25.0/0.30.0/0.31.0 eagle3_utils.py): V4's
    # dspark_target_layer_ids [40, 41, 42] become aux_hidden_state_layers (41, 42, 43);
    # V4.1 keeps its ids; an MTP drafter captures nothing
    with offline_hub():
        v4 = load_model("deepseek-ai/DeepSeek-V4-Flash-0731")
        v41 = load_model("deepseek-ai/DeepSeek-V4.1-Flash")
    assert aux_capture_layers(v4, parse_vllm(DSPARK)) == (41, 42, 43)
    assert aux_capture_layers(v41, parse_vllm(DSPARK)) == (37, 38, 39)
    mtp = parse_vllm('{"method": "mtp", "num_speculative_tokens": 1}')
    assert aux_capture_layers(v4, mtp) == ()
    assert aux_capture_layers(v4, None) == ()
