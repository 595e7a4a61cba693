"""Cost and energy arithmetic, and the default price table's coverage."""

from __future__ import annotations

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan.cost import DEFAULT_GPU_HOUR_USD, cost, gpu_hour_price
from kvscope.specs.hardware import get_gpu, list_gpus

H100 = get_gpu("h100")


def test_dollars_per_million_tokens() -> None:
    # 8 GPUs x $2.50 = $20/h; 10,000 tok/s = 36 M tok/h -> $0.5556 per M tokens.
    c = cost(H100, 8, 10_000.0, gpu_hour_usd=2.50)
    assert c.usd_per_hour == 20.0
    assert c.usd_per_million_tokens == pytest.approx(20 / 36)
    assert c.price_source == "--gpu-hour-price"


def test_energy_per_million_tokens_from_tdp() -> None:
    # 8 x 700 W = 5.6 kW for 36 M tokens/h -> 0.1556 kWh per M tokens; PUE 1.3 scales it.
    c = cost(H100, 8, 10_000.0)
    assert c.power_w == 5600
    assert c.kwh_per_million_tokens == pytest.approx(5.6 / 36)
    assert cost(H100, 8, 10_000.0, pue=1.3).kwh_per_million_tokens == pytest.approx(1.3 * 5.6 / 36)


def test_zero_throughput_has_no_per_token_figures() -> None:
    c = cost(H100, 1, 0.0)
    assert c.usd_per_million_tokens is None and c.kwh_per_million_tokens is None


def test_every_catalogue_gpu_has_a_default_price() -> None:
    names = {g.name for g in list_gpus()}
    assert names == set(DEFAULT_GPU_HOUR_USD)
    assert all(p > 0 for p in DEFAULT_GPU_HOUR_USD.values())


def test_defaults_order_like_the_hardware() -> None:
    def p(name: str) -> float:
        return gpu_hour_price(get_gpu(name))[0]

    assert p("l4") < p("a100") < p("h100") < p("h200") < p("b200")


@pytest.mark.parametrize("kwargs", [{"gpu_hour_usd": -1.0}, {"pue": 0.9}])
def test_bad_inputs_are_user_errors(kwargs: dict[str, float]) -> None:
    with pytest.raises(KvscopeError):
        cost(H100, 1, 100.0, **kwargs)  # type: ignore[arg-type]


def test_zero_gpus_is_rejected() -> None:
    with pytest.raises(KvscopeError):
        cost(H100, 0, 100.0)
