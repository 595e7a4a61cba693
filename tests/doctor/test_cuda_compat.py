"""Driver / CUDA runtime compatibility against NVIDIA's published table."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvscope.doctor.cuda_compat import (
    TOOLKIT_MIN_DRIVER,
    cuda_supported_by_driver,
    from_driver_api,
    parse_version,
    runtime_verdict,
)
from kvscope.doctor.model import Status


def test_published_driver_to_cuda_pairs() -> None:
    # (driver, newest CUDA whose GA minimum it meets) from the release notes' Table 3.
    pairs = {
        "470.182.03": (11, 4),
        "525.60.13": (12, 0),
        "535.104.05": (12, 2),
        "550.54.14": (12, 4),
        "550.54.13": (12, 3),
        "560.35.03": (12, 6),
        "570.124.06": (12, 8),
        "580.65.06": (13, 0),
        "450.51.05": (11, 0),
    }
    for drv, cuda in pairs.items():
        v = parse_version(drv)
        assert v is not None
        assert cuda_supported_by_driver(v) == cuda, drv
    assert cuda_supported_by_driver((440, 33)) is None


def test_table_minimums_grow_with_cuda() -> None:
    ordered = [parse_version(TOOLKIT_MIN_DRIVER[k]) for k in sorted(TOOLKIT_MIN_DRIVER)]
    assert ordered == sorted(ordered)  # type: ignore[type-var]


@given(st.integers(400, 700), st.integers(0, 200), st.integers(400, 700), st.integers(0, 200))
def test_newer_driver_never_supports_less_cuda(a: int, b: int, c: int, d: int) -> None:
    lo, hi = sorted([(a, b), (c, d)])
    s_lo, s_hi = cuda_supported_by_driver(lo), cuda_supported_by_driver(hi)
    if s_lo is not None:
        assert s_hi is not None and s_hi >= s_lo


@given(st.sampled_from(sorted(TOOLKIT_MIN_DRIVER)), st.sampled_from(sorted(TOOLKIT_MIN_DRIVER)))
def test_verdict_ok_exactly_when_runtime_not_newer(
    rt: tuple[int, int], dc: tuple[int, int]
) -> None:
    status, _, fix = runtime_verdict((999, 0), dc, rt, compat_libcuda=False)
    assert (status is Status.OK) == (rt <= dc)
    assert (fix == "") == (status is Status.OK)


def test_verdicts() -> None:
    # same major, newer minor, driver above the 12.x minor-compatibility minimum: warn
    s, summary, _ = runtime_verdict((535, 104, 5), (12, 2), (12, 8), False)
    assert s is Status.WARN and "minor-version compatibility" in summary
    # newer major: fail, and the fix names the 13.0 GA driver
    s, summary, fix = runtime_verdict((535, 104, 5), (12, 2), (13, 0), False)
    assert s is Status.FAIL and ">= 580.65.06" in summary and "cuda-compat-13-0" in fix
    # 11.x driver below the 12.x minimum: fail
    s, _, _ = runtime_verdict((470, 182, 3), (11, 4), (12, 1), False)
    assert s is Status.FAIL
    # the forward-compatibility libcuda makes it work
    s, _, _ = runtime_verdict((535, 104, 5), (12, 2), (13, 0), True)
    assert s is Status.OK


def test_driver_api_integer() -> None:
    assert from_driver_api(12040) == (12, 4)
    assert from_driver_api(11080) == (11, 8)
    assert from_driver_api(13000) == (13, 0)
