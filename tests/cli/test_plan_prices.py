"""`kvscope plan` and `kvscope gpus`: the price per GPU-hour and the context every cost
figure rests on, visible and changeable (flag > prices file > default)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process, run_json

LLAMA = ("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--json")


@pytest.fixture(autouse=True)
def no_user_prices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test starts with an empty per-user config folder (no prices.yaml)."""
    cfg = tmp_path / "xdg"
    cfg.mkdir()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(cfg))
    return cfg


def test_hand_checked_dollars_per_million_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """Llama-3.1-8B (bf16) on one H100 SXM, 32 requests of 8,192 tokens, $2.99/GPU-hour.

    Decode is memory-bound: a step reads the weights other than the embedding table
    (16.06 GB - 128,256 x 4,096 x 2 B = 15.01 GB) and the KV of 32 x 8,192 tokens at
    32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B/token, 34.36 GB: 49.37 GB at
    80 % of 3,350 GB/s = 2,680 GB/s, so 18.42 ms per step and 32 / 0.01842 = 1,737 tokens/s.
    $2.99 per hour / (1,737 x 3,600 tokens per hour) x 1e6 = $0.478 per million tokens.
    """
    doc = run_json(
        capsys,
        *LLAMA,
        "--target-context",
        "8192",
        "--target-concurrency",
        "32",
        "--gpu-hour-price",
        "2.99",
    )
    c = doc["cost"]
    assert doc["roofline"]["throughput"]["tpot_s"] == pytest.approx(0.01842, rel=2e-3)
    assert c["tokens_per_s"] == pytest.approx(1737, rel=2e-3)
    assert c["usd_per_million_tokens"] == pytest.approx(0.478, rel=2e-3)
    assert c["context_tokens"] == 8192 and c["context_source"] == "--target-context"
    assert c["price_source"] == "--gpu-hour-price"


def test_default_context_is_typical_not_the_maximum(capsys: pytest.CaptureFixture[str]) -> None:
    """DeepSeek-V3 on 8 H200: priced at its 163,840-token maximum a request's KV leaves room
    for 3 requests and $34.5/M tokens; the default prices a typical 8,192-token request."""
    argv = ("plan", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--json")
    default = run_json(capsys, *argv)["cost"]
    longest = run_json(capsys, *argv, "--target-context", "163840")["cost"]
    assert default["context_tokens"] == 8192
    assert "163,840" in default["context_source"] and "typical" in default["context_source"]
    assert longest["context_tokens"] == 163840
    # $35.9 while the TP group was charged vLLM's 2.1 GiB of NCCL buffers (up to 0.25)
    assert longest["usd_per_million_tokens"] == pytest.approx(34.5, rel=0.01)
    assert default["usd_per_million_tokens"] < longest["usd_per_million_tokens"] / 5


def test_short_max_model_len_is_the_context(capsys: pytest.CaptureFixture[str]) -> None:
    c = run_json(capsys, *LLAMA, "--max-model-len", "4096")["cost"]
    assert c["context_tokens"] == 4096 and c["context_source"] == "default: --max-model-len 4,096"


def test_table_prints_the_context_and_the_price_source(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run_in_process(["plan", *LLAMA[1:-1]], capsys)
    assert code == 0, err
    flat = " ".join(out.split())
    assert "at 8,192 tokens/request (default: typical 8,192" in flat
    assert "price per GPU-hour │ $2.99 │ kvscope default estimate" in flat


def test_named_price_and_precedence(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("gpus:\n  H100: 2.49\nproviders:\n  acme:\n    H100: 2.10\n")
    by_file = run_json(capsys, *LLAMA, "--prices", str(prices))["cost"]
    assert by_file["gpu_hour_usd"] == 2.49 and by_file["price_source"] == f"prices file {prices}"
    by_provider = run_json(capsys, *LLAMA, "--prices", str(prices), "--provider", "acme")["cost"]
    assert by_provider["gpu_hour_usd"] == 2.10
    assert by_provider["price_source"].endswith("provider acme")
    by_flag = run_json(capsys, *LLAMA, "--prices", str(prices), "--gpu-hour-price", "h100-sxm=3.5")
    assert by_flag["cost"]["gpu_hour_usd"] == 3.5  # flag > file
    other_gpu = run_json(capsys, *LLAMA, "--gpu-hour-price", "A100=1.0")["cost"]
    assert other_gpu["gpu_hour_usd"] == 2.99  # only the named GPU changes; H100 stays default
    assert other_gpu["price_source"].startswith("kvscope default estimate")
    # the dollars follow the price: 3.5 / 2.49 times the file's figure
    assert by_flag["cost"]["usd_per_million_tokens"] == pytest.approx(
        by_file["usd_per_million_tokens"] * 3.5 / 2.49
    )


def test_per_user_prices_file_is_read(
    capsys: pytest.CaptureFixture[str], no_user_prices: Path
) -> None:
    (no_user_prices / "kvscope").mkdir()
    (no_user_prices / "kvscope" / "prices.yaml").write_text("gpus:\n  H100-SXM-80GB: 1.99\n")
    c = run_json(capsys, *LLAMA)["cost"]
    assert c["gpu_hour_usd"] == 1.99
    assert c["price_source"] == f"prices file {no_user_prices / 'kvscope' / 'prices.yaml'}"


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--gpu-hour-price", "H999=2"), "unknown GPU 'H999'"),
        (("--gpu-hour-price", "nan"), "finite"),
        (("--gpu-hour-price", "-2"), "must not be negative"),
        (("--gpu-hour-price", "H100=x"), "must be a number"),
        (("--provider", "acme"), "needs a prices file"),
        (("--prices", "/nonexistent/prices.yaml"), "prices.yaml"),
    ],
)
def test_bad_prices_are_one_line(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], needle: str
) -> None:
    code, out, err = run_in_process([*LLAMA, *extra], capsys)
    one_error_line(code, err, needle)
    assert out == ""


@pytest.mark.parametrize(
    ("text", "needle"),
    [("gpus: {H100: 2\n", "prices file"), ("gpus:\n  H100: -1\n", "must not be negative")],
)
def test_bad_prices_file_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    code, _, err = run_in_process([*LLAMA, "--prices", str(path)], capsys)
    one_error_line(code, err, needle)


def test_search_ranks_at_the_stated_context_and_named_prices(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("plan", "--model", "llama-3.1-8b", "--search", "--target-concurrency", "16", "--json")
    base = run_json(capsys, *argv)
    assert base["target_context"] == 8192 and "typical" in base["context_source"]
    top = base["candidates"][0]
    assert top["kv_needed_tokens"] == 8192 * 16
    assert top["price_source"].startswith("kvscope default estimate")
    # Price the cheapest GPU out of the running: the ranking follows the named price.
    dear = run_json(capsys, *argv, "--gpu-hour-price", f"{top['gpu']}=100")
    assert dear["price_overridden"]
    assert dear["candidates"][0]["gpu"] != top["gpu"]
    shorter = run_json(capsys, *argv, "--target-context", "2048")
    assert shorter["target_context"] == 2048
    assert shorter["candidates"][0]["kv_needed_tokens"] == 2048 * 16


def test_search_table_names_the_context_and_prices(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_in_process(
        [
            *("plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--search"),
            *("--target-concurrency", "16", "--gpu-hour-price", "2.0"),
        ],
        capsys,
    )
    assert code == 0, err
    flat = " ".join(out.split())
    assert "costed at 8,192 tokens per request (default: typical context 8,192)" in flat
    assert "H100-SXM-80GB $2.00/h (--gpu-hour-price)" in flat


def test_gpus_lists_price_and_source(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = run_json(capsys, "gpus", "--json")
    h100 = next(r for r in rows if r["name"] == "H100-SXM-80GB")
    assert h100["gpu_hour_usd"] == 2.99
    assert h100["gpu_hour_price_source"].startswith("kvscope default estimate: 2025 on-demand")
    prices = tmp_path / "p.json"
    prices.write_text('{"gpus": {"L4": 0.61}}')
    one = run_json(capsys, "gpus", "l4", "--json", "--prices", str(prices))
    assert one["gpu_hour_usd"] == 0.61 and one["gpu_hour_price_source"] == f"prices file {prices}"
    code, out, _ = run_in_process(["gpus", "--gpu-hour-price", "H100=2.5"], capsys)
    assert code == 0
    flat = " ".join(out.split())
    # rows in catalogue order: the A100s come first (source a), then the H100 (source b)
    assert "2.50b" in flat and "b USD per GPU-hour: --gpu-hour-price" in flat
    assert "a USD per GPU-hour: kvscope default estimate: 2025 on-demand, specialised" in flat


def test_help_states_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """Every plan option has a description and a default, and the defaults the help names
    are the ones the code uses."""
    from kvscope.plan.config import DEFAULT_ENGINE_VERSION
    from kvscope.plan.performance import TYPICAL_CONTEXT_TOKENS

    _, out, _ = run_in_process(["plan", "--help"], capsys)
    flat = " ".join(out.split())
    v = DEFAULT_ENGINE_VERSION
    assert f"[default: vLLM {v['vllm']}, SGLang {v['sglang']}]" in flat
    assert f"capped at {TYPICAL_CONTEXT_TOKENS:,}" in flat
    assert "--gpu-hour-price, then the prices file" in flat
    import typer.core
    import typer.main

    from kvscope.cli.main import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name in ("plan", "gpus"):
        for param in commands[name].params:
            if isinstance(param, typer.core.TyperOption) and param.name != "help":
                text = param.help or ""
                assert text, f"{name} {param.opts} has no help"
                if param.required or param.default in (None, False, ()):
                    continue  # nothing to state: off unless given
                assert param.show_default or "default" in text, (
                    f"{name} {param.opts} states no default"
                )
