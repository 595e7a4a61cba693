"""Prices per GPU-hour: the flag, the prices file, the per-user file and the defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError, UnknownNameError
from kvscope.plan.cost import DEFAULT_GPU_HOUR_USD, cost
from kvscope.plan.prices import (
    DEFAULT_SOURCE,
    Price,
    Prices,
    default_prices,
    default_prices_file,
    load_prices_file,
    parse_price_flag,
    resolve_prices,
)
from kvscope.specs.hardware import get_gpu, list_gpus

H100 = get_gpu("H100")
A100 = get_gpu("A100-80GB")
L4 = get_gpu("L4")
NO_USER_FILE = {"XDG_CONFIG_HOME": "/nonexistent-kvscope-test"}


def _file(tmp_path: Path, text: str, name: str = "prices.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_every_catalogue_gpu_has_a_sourced_default() -> None:
    d = default_prices()
    assert set(d) == {g.name for g in list_gpus()}
    assert d["H100-SXM-80GB"].usd_per_gpu_hour == 2.99
    assert d["L4-24GB"].source.startswith(DEFAULT_SOURCE)
    assert "hyperscaler" in d["L4-24GB"].source and "GPU clouds" in d["H100-SXM-80GB"].source
    assert DEFAULT_GPU_HOUR_USD["H200-SXM-141GB"] == 3.79


def test_one_number_prices_every_gpu() -> None:
    p = parse_price_flag("2.5")
    assert p.price(H100) == Price("H100-SXM-80GB", 2.5, "--gpu-hour-price")
    assert p.require(L4).usd_per_gpu_hour == 2.5


def test_named_prices_take_any_spelling_and_leave_others_at_default() -> None:
    p = parse_price_flag("h100=2.10, NVIDIA A100 80GB PCIe = 1.5")
    assert p.require(H100).usd_per_gpu_hour == 2.10
    assert p.require(get_gpu("A100-PCIe-80GB")).usd_per_gpu_hour == 1.5
    assert p.require(L4).usd_per_gpu_hour == 0.80  # the default estimate
    assert p.require(L4).source.startswith(DEFAULT_SOURCE)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("H999=2", "unknown GPU 'H999'"),
        ("-1", "must not be negative"),
        ("0", "must be > 0"),
        ("nan", "finite"),
        ("H100=inf", "finite"),
        ("H100=-3", "must not be negative"),
        ("H100=", "must be a number"),
        ("H100=2,,A100=1", "is not GPU=PRICE"),
        ("H100=2,h100-80gb=3", "priced twice"),
        ("1e308", "must be <="),
    ],
)
def test_bad_flag_is_a_user_error(text: str, needle: str) -> None:
    with pytest.raises(KvscopeError) as err:
        parse_price_flag(text)
    assert needle in err.value.one_line()
    assert "\n" not in err.value.one_line()


def test_unknown_gpu_names_close_matches() -> None:
    with pytest.raises(UnknownNameError) as err:
        parse_price_flag("H10O=2")
    assert err.value.close_matches


def test_file_gpus_and_provider_column(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "gpus:\n  H100: 2.49\n  A100-80GB: 1.60\nproviders:\n  acme:\n    H100: 2.10\n",
    )
    plain = load_prices_file(path)
    assert {p.gpu: p.usd_per_gpu_hour for p in plain} == {
        "H100-SXM-80GB": 2.49,
        "A100-SXM-80GB": 1.60,
    }
    assert plain[0].source == f"prices file {path}"
    acme = Prices(from_file=load_prices_file(path, "acme"))
    assert acme.require(H100).usd_per_gpu_hour == 2.10
    assert acme.require(H100).source == f"prices file {path}, provider acme"
    assert acme.require(A100).usd_per_gpu_hour == 1.60  # not in the column: the file's gpus
    assert acme.require(L4).source.startswith(DEFAULT_SOURCE)  # in neither: the default


def test_json_file(tmp_path: Path) -> None:
    path = _file(tmp_path, json.dumps({"gpus": {"L4": 0.5}}), "p.json")
    assert load_prices_file(path)[0].usd_per_gpu_hour == 0.5


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus: [1, 2\n", "prices file"),  # not YAML
        ("- 1\n", "a mapping with 'gpus'"),
        ("gpu:\n  H100: 2\n", "unknown key 'gpu'"),
        ("gpus:\n  H100: .nan\n", "finite"),
        ("gpus:\n  H100: -2\n", "must not be negative"),
        ("gpus:\n  H100: 0\n", "must be > 0"),
        ("gpus:\n  H100: cheap\n", "must be a number"),
        ("gpus:\n  H999: 2\n", "unknown GPU 'H999'"),
        ("gpus: 3\n", "must be a mapping"),
    ],
)
def test_bad_files_are_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = _file(tmp_path, text)
    with pytest.raises(KvscopeError) as err:
        resolve_prices(prices_file=str(path), env=NO_USER_FILE)
    line = err.value.one_line()
    assert needle in line and "\n" not in line


def test_unknown_provider_lists_the_known(tmp_path: Path) -> None:
    path = _file(tmp_path, "providers:\n  acme:\n    H100: 2\n  globex:\n    H100: 3\n")
    with pytest.raises(UnknownNameError) as err:
        resolve_prices(prices_file=str(path), provider="acmee", env=NO_USER_FILE)
    assert err.value.close_matches == ["acme"]


def test_provider_needs_a_file() -> None:
    with pytest.raises(KvscopeError, match="needs a prices file"):
        resolve_prices(provider="acme", env=NO_USER_FILE)


def test_precedence_flag_over_file_over_default(tmp_path: Path) -> None:
    path = _file(tmp_path, "gpus:\n  H100: 2.49\n  A100-80GB: 1.60\n")
    p = resolve_prices("H100=9", str(path), env=NO_USER_FILE)
    assert p.require(H100).usd_per_gpu_hour == 9.0  # flag beats file
    assert p.require(A100).usd_per_gpu_hour == 1.60  # file beats default
    assert p.require(L4).usd_per_gpu_hour == 0.80  # default
    every = resolve_prices("4", str(path), env=NO_USER_FILE)
    assert every.require(A100).usd_per_gpu_hour == 4.0  # one number beats the file too
    assert p.overridden and not Prices().overridden


def test_per_user_default_file(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    (cfg / "kvscope").mkdir(parents=True)
    (cfg / "kvscope" / "prices.yaml").write_text("gpus:\n  L4: 0.42\n")
    env = {"XDG_CONFIG_HOME": str(cfg)}
    assert default_prices_file(env) == cfg / "kvscope" / "prices.yaml"
    p = resolve_prices(env=env)
    assert p.require(L4).usd_per_gpu_hour == 0.42
    assert "cfg/kvscope/prices.yaml" in p.require(L4).source
    # --prices replaces the per-user file rather than merging with it
    other = _file(tmp_path, "gpus:\n  H100: 2\n")
    assert resolve_prices(prices_file=str(other), env=env).require(L4).usd_per_gpu_hour == 0.80


def test_relative_xdg_config_home_is_ignored() -> None:
    assert default_prices_file({"XDG_CONFIG_HOME": "rel/dir"}) == (
        Path.home() / ".config" / "kvscope" / "prices.yaml"
    )


def test_cost_says_which_price_it_used(tmp_path: Path) -> None:
    """4 H100 at the file's $2.49/h make $9.96/h; at 1,000 tokens/s (3.6 M tokens/h) that
    is 9.96 / 3.6 = $2.7667 per million tokens."""
    path = _file(tmp_path, "gpus:\n  H100: 2.49\n")
    c = cost(H100, 4, 1000.0, resolve_prices(prices_file=str(path), env=NO_USER_FILE))
    assert c.usd_per_hour == pytest.approx(9.96)
    assert c.usd_per_million_tokens == pytest.approx(2.76667, rel=1e-5)
    assert c.price_source == f"prices file {path}"
