"""Speculative decoding in the plan: the one flag parser, against vLLM 0.33.0's own config
class (the oracle venv), SGLang's automatic choice, and the drafter's share of a GPU."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.oracle import vllm_python

from kvscope.errors import KvscopeError
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.drafter import Drafter, plan_drafter
from kvscope.plan.memory import plan_memory
from kvscope.plan.speculative import (
    KNOWN_KEYS,
    METHODS,
    MTP_ALIASES,
    UNMODELLED,
    from_sglang,
    parse_vllm,
)
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

ORACLE = """
import dataclasses, json, typing
import vllm.config.speculative as s
print(json.dumps({
    "methods": list(typing.get_args(s.SpeculativeMethod)),
    "mtp": list(typing.get_args(s.MTPModelTypes)),
    "fields": [f.name for f in dataclasses.fields(s.SpeculativeConfig)],
}))
"""


@pytest.mark.slow
def test_methods_and_keys_are_vllms_own() -> None:
    out = subprocess.run(
        [vllm_python(), "-c", ORACLE], capture_output=True, text=True, timeout=85, check=True
    )
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(doc["mtp"]) - {"mtp"} == set(MTP_ALIASES)  # "mtp" itself is the target name
    assert set(doc["fields"]) >= KNOWN_KEYS
    # every method vLLM accepts is either modelled, an MTP alias, or refused by name
    assert set(doc["methods"]) <= {*METHODS, *UNMODELLED, *MTP_ALIASES}


@given(st.sampled_from(sorted(MTP_ALIASES)), st.integers(1, 8))
def test_every_mtp_model_type_is_mtp(alias: str, k: int) -> None:
    spec = parse_vllm(json.dumps({"method": alias, "num_speculative_tokens": k}))
    assert (spec.method, spec.num_speculative_tokens, spec.verify_tokens) == ("mtp", k, k + 1)


def test_method_inferred_from_model_as_vllm_does() -> None:
    assert parse_vllm('{"model": "[ngram]", "num_speculative_tokens": 2}').method == "ngram"
    spec = parse_vllm('{"model": "org/small", "num_speculative_tokens": 2}')
    assert (spec.method, spec.model) == ("draft_model", "org/small")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"method": "medusa2", "num_speculative_tokens": 3}', "unknown method 'medusa2'"),
        ('{"method": "dflash", "num_speculative_tokens": 3}', "not modelled"),
        ('{"method": "mtp"}', "num_speculative_tokens is required"),
        ('{"method": "mtp", "num_speculative_tokens": 0}', "num_speculative_tokens"),
        ('{"method": "mtp", "num_speculative_tokens": 1, "bogus": 1}', "unknown key(s) bogus"),
        ('{"method": "draft_model", "num_speculative_tokens": 1}', "needs a model"),
        ("[1]", "JSON object"),
        ("{", "not JSON"),
    ],
)
def test_bad_config_is_one_line(text: str, needle: str) -> None:
    with pytest.raises(KvscopeError) as err:
        parse_vllm(text)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_sglang_automatic_choice() -> None:
    # server_args.auto_choose_speculative_params: DeepSeek (3, 1, 4), other models (5, 4, 8)
    ds = from_sglang("NEXTN", deepseek_like=True)
    assert (ds.method, ds.num_speculative_tokens, ds.eagle_topk, ds.verify_tokens) == (
        "mtp",
        3,
        1,
        4,
    )
    other = from_sglang("EAGLE3", draft_model="org/eagle3")
    assert (other.num_speculative_tokens, other.eagle_topk, other.verify_tokens) == (5, 4, 8)
    # topk 1 forces num_draft_tokens = num_steps + 1
    assert from_sglang("EAGLE", 2, 1, 9, deepseek_like=True).verify_tokens == 3
    with pytest.raises(KvscopeError, match="unknown algorithm"):
        from_sglang("LOOKAHEAD")
    with pytest.raises(KvscopeError, match="draft-model-path"):
        from_sglang("EAGLE3")


def _v3(spec_json: str | None, tp: int = 8) -> tuple[float, float]:
    model = load_model("deepseek-ai/DeepSeek-V3")
    eng = EngineConfig(engine_version="0.33.0")
    if spec_json:
        eng = replace(eng, speculative=parse_vllm(spec_json))
    plan = plan_memory(model, get_gpu("H200"), Parallelism(tp=tp), eng)
    return plan.weights_gib * (1 << 30), plan.kv_bytes_per_token


def test_deepseek_mtp_drafter_weights_and_kv_layer() -> None:
    base_w, base_kv = _v3(None)
    mtp_w, mtp_kv = _v3('{"method": "deepseek_mtp", "num_speculative_tokens": 3}')
    # DeepSeek-V3 README: "14B MTP module"; its embedding and head (2 x 129,280 x 7,168 =
    # 1.85 B) are the target's in vLLM, the rest is fp8 (about one byte a parameter) over TP 8
    drafter_bytes = (mtp_w - base_w) * 8
    assert 11.0e9 < drafter_bytes < 12.6e9
    # the MTP layer's MLA cache joins the target's one group: 62 layers where there were 61
    assert mtp_kv / base_kv == pytest.approx(62 / 61, rel=1e-9)
    # k above the layer count reuses the one layer: same memory
    assert _v3('{"method": "mtp", "num_speculative_tokens": 1}') == (mtp_w, mtp_kv)


def test_ngram_adds_nothing_and_mtp_needs_mtp_layers() -> None:
    assert _v3('{"method": "ngram", "num_speculative_tokens": 4}') == _v3(None)
    llama = load_model("meta-llama/Llama-3.1-8B")
    eng = EngineConfig(speculative=parse_vllm('{"method": "mtp", "num_speculative_tokens": 1}'))
    with pytest.raises(KvscopeError, match="num_nextn_predict_layers"):
        plan_memory(llama, get_gpu("H100"), Parallelism(), eng)


def _eagle_head(tmp_path: Path) -> str:
    # the shape of yuhuili/EAGLE-LLaMA3.1-Instruct-8B's config.json: one Llama-3.1-8B layer
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "num_hidden_layers": 1,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def test_eagle_heads_share_the_targets_embedding_and_join_its_kv_group(tmp_path: Path) -> None:
    target = load_model("meta-llama/Llama-3.1-8B")
    head = _eagle_head(tmp_path)

    def drafter(method: str) -> Drafter:
        cfg = json.dumps({"method": method, "model": head, "num_speculative_tokens": 3})
        return plan_drafter(target, parse_vllm(cfg), Parallelism())

    eagle, eagle3, whole = drafter("eagle"), drafter("eagle3"), drafter("draft_model")
    # a whole draft model keeps its 2 x 128,256 x 4,096 embedding and head (2.1 GB in bf16)
    assert whole.extra_weight_bytes - eagle.extra_weight_bytes > 1.9e9
    assert 0 < eagle.extra_weight_bytes < eagle3.extra_weight_bytes < whole.extra_weight_bytes
    # the head's one layer has the target's KV page: it joins the target's group, and so
    # does the same layer loaded as a whole one-layer draft model
    assert (eagle.kv_layers, eagle3.kv_layers, whole.kv_layers) == (1, 1, 1)
    base = plan_memory(target, get_gpu("H100"), Parallelism(), EngineConfig())
    cfg = json.dumps({"method": "eagle", "model": head, "num_speculative_tokens": 3})
    spec = plan_memory(
        target, get_gpu("H100"), Parallelism(), EngineConfig(speculative=parse_vllm(cfg))
    )
    assert spec.kv_bytes_per_token / base.kv_bytes_per_token == pytest.approx(33 / 32)
    assert spec.weights_gib > base.weights_gib


def test_eagle3_head_kv_layer_matches_a_public_start() -> None:
    # vLLM 0.24.0, Qwen3-8B + a one-layer EAGLE-3 head, fp8 KV (github.com/dcstang/
    # eagle3-spec-dec logs/run_all_20260701_141721.log): "Available KV cache memory:
    # 51.03 GiB" and "GPU KV cache size: 723,040 tokens", i.e. 37 layers per token. From the
    # logged memory the plan must land on the logged tokens; without the head's layer it
    # would give 36/37 as many bytes per token (2.8 % more tokens).
    from tests.plan.log_cases import case_by_id

    case = case_by_id("eagle3lab-h100-qwen3-8b-eagle3-0.24")
    plan = case.plan(kv_cache_memory_bytes=int(51.03 * 2**30))
    assert plan.kv_bytes_per_token == 37 * 8 * 128 * 2  # fp8: one byte per element
    assert plan.kv_tokens == pytest.approx(723_040, rel=0.001)
    bare = type(case)({**case.row, "speculative_config": ""})
    assert bare.plan(kv_cache_memory_bytes=int(51.03 * 2**30)).kv_tokens > 1.02 * 723_040


def test_eagle3_head_with_a_trimmed_vocabulary_keeps_only_its_rows(tmp_path: Path) -> None:
    # EAGLE-3 heads for Llama 3.1 8B (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B, SpecForge's
    # configs/llama3-8B-eagle3.json) predict over draft_vocab_size = 32,000 of the target's
    # 128,256 tokens: vLLM's Eagle3LlamaForCausalLM builds ParallelLMHead(draft_vocab_size)
    # plus an int64 draft-to-target map of 32,000 entries, not a full-vocabulary head.
    target = load_model("meta-llama/Llama-3.1-8B")
    full = json.loads(Path(_eagle_head(tmp_path)).read_text())
    trimmed_dir = tmp_path / "trimmed"
    trimmed_dir.mkdir()
    (trimmed_dir / "config.json").write_text(json.dumps({**full, "draft_vocab_size": 32_000}))

    def head_bytes(path: str, tp: int) -> float:
        cfg = json.dumps({"method": "eagle3", "model": path, "num_speculative_tokens": 3})
        return plan_drafter(target, parse_vllm(cfg), Parallelism(tp=tp)).extra_weight_bytes

    full_path = str(tmp_path / "config.json")
    for tp in (1, 2, 4):
        # the full-vocabulary head is unchanged by a draft_vocab_size equal to vocab_size
        same_dir = tmp_path / f"same{tp}"
        same_dir.mkdir()
        (same_dir / "config.json").write_text(json.dumps({**full, "draft_vocab_size": 128_256}))
        assert head_bytes(str(same_dir / "config.json"), tp) == head_bytes(full_path, tp)
        saved = head_bytes(full_path, tp) - head_bytes(str(trimmed_dir / "config.json"), tp)
        # 96,256 fewer rows of 4,096 bf16 values, split over TP, less the 256 kB token map
        assert saved == pytest.approx((128_256 - 32_000) * 4096 * 2 / tp - 32_000 * 8, rel=1e-3)


def _llama_1b(tmp_path: Path) -> str:
    # the shape of meta-llama/Llama-3.2-1B's config.json: 16 layers, 8 KV heads of 64
    return str(Path(__file__).with_name("data") / "configs" / "llama-3.2-1b.json")


def test_a_draft_model_of_another_page_joins_the_targets_one_group(tmp_path: Path) -> None:
    # Llama-3.1-8B (32 layers of 8 x 128) drafted by a Llama-3.2-1B (16 layers of 8 x 64):
    # vLLM keeps one UniformTypeKVCacheSpecs group whose page is the sum of the layers'
    # (checked against vLLM 0.33.0 itself by benchmarks/vllm_oracle.py), so each token costs
    # 32 x 4,096 + 16 x 2,048 bytes in bf16 and the drafter's 16 layers count.
    target = load_model("meta-llama/Llama-3.1-8B")
    cfg = json.dumps(
        {"method": "draft_model", "model": _llama_1b(tmp_path), "num_speculative_tokens": 4}
    )
    eng = EngineConfig(speculative=parse_vllm(cfg), kv_cache_memory_bytes=40 * 2**30)
    plan = plan_memory(target, get_gpu("H100"), Parallelism(), eng)
    assert plan.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 + 16 * 8 * 64 * 2 * 2
    assert plan.num_gpu_blocks == 40 * 2**30 // (16 * plan.kv_bytes_per_token)
    assert plan.speculative is not None
    assert plan.speculative["drafter_kv_layers"] == 16
    assert plan.speculative["not_modelled"] is None


@pytest.mark.parametrize(("method", "draft_tp"), [("draft_model", 1), ("eagle", 2)])
def test_draft_tensor_parallel_size_follows_vllms_rule(
    tmp_path: Path, method: str, draft_tp: int
) -> None:
    # vllm/config/speculative.py _verify_and_get_draft_tp: 1 or the target's TP; a draft
    # model must run at the target's (v1/spec_decode/draft_model.py, v0.25.0 and v0.31.0)
    target = load_model("meta-llama/Llama-3.1-8B")
    doc = {"method": method, "model": _eagle_head(tmp_path), "num_speculative_tokens": 2}
    with pytest.raises(KvscopeError, match="draft_tensor_parallel_size"):
        spec = parse_vllm(json.dumps({**doc, "draft_tensor_parallel_size": draft_tp}))
        plan_drafter(target, spec, Parallelism(tp=4))
    # the target's own TP, and 1 for a head, are accepted
    ok = parse_vllm(json.dumps({**doc, "draft_tensor_parallel_size": 4}))
    assert plan_drafter(target, ok, Parallelism(tp=4)).extra_weight_bytes > 0
