"""ModelSpec figures pinned to published numbers (model cards, papers, engine logs)."""

from __future__ import annotations

import math

import pytest

from kvscope.specs.hardware import GIB
from kvscope.specs.registry import list_presets, load_model

MIB = 1 << 20

# Activated-parameter conventions of each publisher (checked against their cards):
# DeepSeek and OpenAI leave the input embedding out; Qwen, Meta, Mistral count it.
PRESET_IDS = [p.id for p in list_presets()]


def _sig_digits(x: float) -> int:
    mantissa = f"{x:.6g}".split("e")[0].replace(".", "").replace("-", "").rstrip("0")
    return max(1, len(mantissa.lstrip("0")))


def matches_published(computed: float, published: float) -> bool:
    """Within 1 %, or equal at the precision the figure was published with.

    Cards give two or three significant digits ("1.6T", "24B", "3.3B"), some rounding and
    some truncating (Qwen3-30B-A3B: 3.35B counted, "3.3B" printed, while its
    "29.9B non-embedding" matches our count to the digit), so both readings are accepted.
    """
    if abs(computed / published - 1) <= 0.01:
        return True
    digits = _sig_digits(published)
    exp = math.floor(math.log10(abs(published)))
    unit = 10.0 ** (exp - digits + 1)
    rounded = round(computed / unit) * unit
    truncated = math.floor(computed / unit) * unit
    return any(abs(x - published) < 1e-6 * published for x in (rounded, truncated))


def test_at_least_the_required_presets_are_bundled() -> None:
    required = {
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.1-70B",
        "meta-llama/Llama-3.1-405B",
        "meta-llama/Llama-3.3-70B-Instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "Qwen/Qwen2.5-72B-Instruct",
        "Qwen/Qwen3-30B-A3B",
        "Qwen/Qwen3-235B-A22B",
        "mistralai/Mixtral-8x7B-v0.1",
        "mistralai/Mistral-Small-24B-Instruct-2501",
        "openai/gpt-oss-20b",
        "openai/gpt-oss-120b",
        "deepseek-ai/DeepSeek-V2-Lite",
        "deepseek-ai/DeepSeek-V2",
        "deepseek-ai/DeepSeek-V3",
        "deepseek-ai/DeepSeek-R1",
        "deepseek-ai/DeepSeek-V3.2",
        "deepseek-ai/DeepSeek-V4-Flash",
        "deepseek-ai/DeepSeek-V4-Pro",
    }
    assert required <= set(PRESET_IDS)


@pytest.mark.parametrize("pid", PRESET_IDS)
def test_total_params_match_the_model_card(pid: str) -> None:
    m = load_model(pid)
    assert m.published.total_params, f"{pid} has no published total"
    assert matches_published(m.total_params, m.published.total_params), (
        f"{pid}: {m.total_params / 1e9:.2f}B vs published {m.published.total_params / 1e9}B"
    )


@pytest.mark.parametrize("pid", PRESET_IDS)
def test_active_params_match_the_model_card(pid: str) -> None:
    m = load_model(pid)
    # DeepSeek-V2-Lite: 2.451B counted without the embedding lookup (DeepSeek's convention,
    # 36.63B -> "37B" for V3) against the V2 paper's "2.4B": equal only when the paper's two
    # significant digits are read as truncated, the reading Qwen3-30B-A3B's card needs too.
    pub = m.published
    assert pub.active_params
    got = m.active_params_by(pub.active_convention)
    assert matches_published(got, pub.active_params), (
        f"{pid}: {got / 1e9:.2f}B ({pub.active_convention}) vs {pub.active_params / 1e9}B"
    )


@pytest.mark.parametrize(
    ("pid", "total_b", "active_b"),
    [
        # Exact counts pinned so a parser change that moves any component shows up.
        ("deepseek-ai/DeepSeek-V3", 671.03, 36.63),  # README: 671B / 37B
        ("deepseek-ai/DeepSeek-V2-Lite", 15.71, 2.45),  # V2 paper: 15.7B / 2.4B
        ("deepseek-ai/DeepSeek-V4-Flash", 284.33, 13.27),  # card: 284B / 13B
        ("meta-llama/Llama-3.1-70B", 70.55, 69.50),  # card: 70.6B
        ("openai/gpt-oss-120b", 116.83, 5.13),  # card: 116.83B / 5.13B
        ("mistralai/Mixtral-8x7B-v0.1", 46.70, 12.75),  # 46.7B / 12.9B with embeddings
    ],
)
def test_pinned_counts(pid: str, total_b: float, active_b: float) -> None:
    m = load_model(pid)
    assert m.total_params / 1e9 == pytest.approx(total_b, abs=0.01)
    assert m.active_params_excl_embedding / 1e9 == pytest.approx(active_b, abs=0.01)


# ------------------------------------------------------------------------ KV bytes
def test_llama_3_1_8b_bf16_kv_is_128_kib_per_token_over_32_layers() -> None:
    m = load_model("meta-llama/Llama-3.1-8B")
    (group,) = m.kv_groups()
    assert len(group.layers) == 32
    assert group.bytes_per_token_per_layer == 4096  # 2 x 8 heads x 128 x 2 B
    assert m.kv_bytes_per_token() == 128 * 1024
    assert m.kv_bytes_per_token("fp8") == 64 * 1024


def test_deepseek_v2_lite_mla_is_31104_bytes_per_token() -> None:
    m = load_model("deepseek-ai/DeepSeek-V2-Lite")
    assert m.kv_bytes_per_token() == 31_104  # 27 x (512 + 64) x 2 B
    assert m.kv_bytes_per_token(tp=8) == 31_104  # latent is not split over TP ranks


def test_deepseek_v4_flash_compressed_history_per_token() -> None:
    m = load_model("deepseek-ai/DeepSeek-V4-Flash")
    # 21 CSA x (584 + 132)/4 + 20 HCA x 584/128 (vLLM's fp8_ds_mla entry of 584 B and the
    # 132-B FP8 indexer key, compression 4 and 128: DeepSeek-V4 config.json compress_ratios)
    assert m.kv_bytes_per_token("fp8") == pytest.approx(3850.25)
    assert m.kv_bytes_per_token("fp8", indexer_dtype="fp4") == pytest.approx(3514.25)
    assert m.attention_kinds == {"dsv4_swa": 2, "dsv4_csa": 21, "dsv4_hca": 20}
    bounded = sum(g.bounded_bytes_per_request for g in m.kv_groups("fp8"))
    window = 128 * 584 * 43
    assert window / MIB == pytest.approx(3.07, abs=0.01)
    assert (bounded - window) / MIB == pytest.approx(11.6, abs=0.05)  # compressor rings


def test_deepseek_v4_pro_history_and_ratio_to_v32() -> None:
    pro = load_model("deepseek-ai/DeepSeek-V4-Pro")
    v32 = load_model("deepseek-ai/DeepSeek-V3.2")
    assert pro.kv_bytes_per_token("fp8") == pytest.approx(5511.4375)
    assert v32.kv_bytes_per_token("fp8") == 48_068  # 61 x (656 fp8_ds_mla + 132 indexer)
    # DeepSeek V4 report, Figure 1: Pro KV at 1M is 9.5x smaller than V3.2's (fp4 indexer).
    ratio = v32.kv_bytes_per_token("fp8") / pro.kv_bytes_per_token("fp8", indexer_dtype="fp4")
    assert ratio == pytest.approx(9.55, abs=0.01)


def test_gqa_heads_split_over_tp_and_replicate_past_the_head_count() -> None:
    m = load_model("meta-llama/Llama-3.1-70B")  # 8 KV heads
    assert m.kv_bytes_per_token(tp=1) == 327_680
    assert m.kv_bytes_per_token(tp=8) == 40_960
    assert m.kv_bytes_per_token(tp=16) == 40_960  # max(1, 8 // 16) = 1 head per rank


def test_gpt_oss_sliding_layers_are_bounded() -> None:
    m = load_model("openai/gpt-oss-120b")
    assert m.attention_kinds == {"sliding": 18, "full": 18}
    assert m.kv_bytes_per_token() == 18 * 2 * 8 * 64 * 2  # only full layers grow
    short = m.kv_bytes_for_request(100)
    assert short == 100 * 36 * 2048
    long = m.kv_bytes_for_request(100_000)
    assert long == 100_000 * 18 * 2048 + 128 * 18 * 2048


# ------------------------------------------------------------------------ weights
@pytest.mark.parametrize(
    ("pid", "gib", "tol"),
    [
        ("openai/gpt-oss-120b", 60.8, 0.01),  # model card: checkpoint 60.8 GiB (MXFP4 MoE)
        ("openai/gpt-oss-20b", 12.8, 0.01),  # model card: 12.8 GiB
        ("meta-llama/Llama-3.1-8B", 14.96, 0.005),  # vLLM "Model loading took 14.99 GiB"
    ],
)
def test_weight_bytes_match_published_checkpoint_sizes(pid: str, gib: float, tol: float) -> None:
    m = load_model(pid)
    assert m.total_weight_bytes / GIB == pytest.approx(gib, rel=tol)


def test_fp8_block_checkpoint_is_about_one_byte_per_linear_weight() -> None:
    m = load_model("deepseek-ai/DeepSeek-V3")
    assert m.quantization.method == "fp8"
    assert m.quantization.block == (128, 128)
    w = m.weight_bytes
    assert w["routed_experts"] == pytest.approx(m.params["routed_experts"] * (1 + 4 / 16384))
    assert w["embedding"] == m.params["embedding"] * 2  # embeddings stay bf16


def test_dtype_override_and_online_fp8() -> None:
    base = load_model("meta-llama/Llama-3.1-8B")
    fp16 = load_model("meta-llama/Llama-3.1-8B", dtype="float16")
    assert fp16.dtype == "float16"
    assert fp16.total_weight_bytes == base.total_weight_bytes
    fp8 = load_model("meta-llama/Llama-3.1-8B", quantization="fp8")
    linear = sum(fp8.params[k] for k in ("attention", "dense_ffn"))
    assert fp8.total_weight_bytes == pytest.approx(base.total_weight_bytes - linear)
