"""User GPU files: entries added and overridden, every field checked at the boundary."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.specs.hardware import get_gpu, list_gpus, set_user_gpus, shipped_gpus, user_gpus
from kvscope.specs.user_gpus import default_gpu_file, load_gpu_file, use_gpu_file

NEW = """
gpus:
  - name: ACME-X1-64GB
    aliases: [x1, "ACME X1"]
    memory_total_bytes: 68000000000
    hbm_bandwidth_gbps: 2000
    bf16_dense_tflops: 400
    pcie_gbps_per_direction: 64
    gpu_hour_usd: 1.25
  - name: h100-sxm5            # any spelling of a shipped GPU
    memory_total_bytes: 84000000000
    aliases: [my-h100]
"""


@pytest.fixture(autouse=True)
def _no_user_gpus() -> Iterator[None]:
    yield
    set_user_gpus(())


def _write(tmp_path: Path, text: str, name: str = "gpus.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_adds_a_gpu_and_overrides_one_field_of_another(tmp_path: Path) -> None:
    gpus = load_gpu_file(_write(tmp_path, NEW), "test file")
    assert [g.name for g in gpus] == ["ACME-X1-64GB", "H100-SXM-80GB"]
    shipped = get_gpu("H100")
    with user_gpus(gpus):
        x1 = get_gpu("ACME X1")
        assert x1.memory_bytes == 68_000_000_000
        assert x1.bf16_flops == 400e12 and x1.hbm_bandwidth == 2e12
        assert x1.gpu_hour_usd == 1.25 and x1.origin == "test file"
        h100 = get_gpu("my-h100")
        assert h100.name == "H100-SXM-80GB" and h100.memory_bytes == 84_000_000_000
        # Only the given field changed; the shipped aliases still resolve.
        assert h100.hbm_bandwidth == shipped.hbm_bandwidth
        assert get_gpu("NVIDIA H100 80GB HBM3") is h100
        assert h100.memory_source == "test file"
        names = [g.name for g in list_gpus()]
        assert names[-1] == "ACME-X1-64GB" and names.count("H100-SXM-80GB") == 1
    assert get_gpu("H100") == shipped
    assert list_gpus() == shipped_gpus()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("  - name: H100\n    hbm_bandwidth_gbps: .nan\n", "hbm_bandwidth_gbps must be a finite"),
        ("  - name: H100\n    tdp_w: -5\n", "tdp_w must be >= 0"),
        ("  - name: H100\n    bf16_dense_tflops: 0\n", "bf16_dense_tflops must be > 0"),
        ("  - name: H100\n    memory_total_bytes: 1.5e9\n    pcie_gen: 4.5\n", "pcie_gen"),
        ("  - name: H100\n    gpu_hour_usd: 1e9\n", "gpu_hour_usd must be <= 1e+06"),
        ("  - name: H100\n    gpus_per_node: 0\n", "gpus_per_node must be >= 1"),
        ("  - name: H100\n    gpus_per_node: 1.5\n", "gpus_per_node"),
        ("  - name: H100\n    hbm_bandwith_gbps: 3\n", "unknown field 'hbm_bandwith_gbps'"),
        ("  - name: H100\n    bf16_dense_tflops: yes\n", "must be a number"),
        ("  - name: H100\n    aliases: h1\n", "aliases must be a list"),
        ("  - name: H100\n    nvlink_bridge: 1\n", "nvlink_bridge must be true or false"),
        ("  - memory_total_bytes: 1e10\n", "needs a name"),
        ("  - name: NEW\n    memory_total_bytes: 1e10\n", "needs hbm_bandwidth_gbps"),
        ("  - name: H100\n  - name: h100-sxm\n", "H100-SXM-80GB is given twice"),
        (
            "  - {name: NEW, aliases: [h200], memory_total_bytes: 1e10, hbm_bandwidth_gbps: 1,"
            " bf16_dense_tflops: 20, pcie_gbps_per_direction: 1}\n",
            "'h200' would name both H200-SXM-141GB and NEW",
        ),
    ],
)
def test_bad_entries_are_one_line_naming_the_file(tmp_path: Path, body: str, needle: str) -> None:
    path = _write(tmp_path, "gpus:\n" + body)
    with pytest.raises(KvscopeError) as info:
        load_gpu_file(path)
    line = info.value.one_line()
    assert needle in line and str(path) in line and "\n" not in line


def test_unknown_field_suggests_the_close_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "gpus:\n  - name: H100\n    hbm_bandwith_gbps: 3\n")
    with pytest.raises(KvscopeError) as info:
        load_gpu_file(path)
    assert "Did you mean 'hbm_bandwidth_gbps'?" in info.value.one_line()


@pytest.mark.parametrize(
    ("text", "name", "needle"),
    [
        ("gpus: [\n  - name: H100\n", "gpus.yaml", "not valid YAML"),
        ('{"gpus": [{"name": "H100", "tdp_w": NaN}]}', "gpus.json", "NaN"),
        ("- name: H100\n", "gpus.yaml", "a mapping with a 'gpus' list"),
        ("gpus: []\nprices: {}\n", "gpus.yaml", "unknown key 'prices'"),
    ],
)
def test_bad_files(tmp_path: Path, text: str, name: str, needle: str) -> None:
    with pytest.raises(KvscopeError) as info:
        load_gpu_file(_write(tmp_path, text, name))
    assert needle in info.value.one_line()


def test_per_user_file_is_found_by_the_xdg_rule(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert default_gpu_file(env) == tmp_path / "kvscope" / "gpus.yaml"
    assert use_gpu_file(None, env) == ()  # no file: nothing laid over the catalogue
    (tmp_path / "kvscope").mkdir()
    _write(tmp_path / "kvscope", NEW)
    gpus = use_gpu_file(None, env)
    assert get_gpu("x1").origin == f"your GPU file {tmp_path / 'kvscope' / 'gpus.yaml'}"
    assert len(gpus) == 2
    # --gpu-spec wins over the per-user file, and names itself.
    other = _write(tmp_path, "gpus:\n  - {name: H200, tdp_w: 650}\n", "other.yaml")
    use_gpu_file(str(other), env)
    assert get_gpu("h200").tdp_w == 650
    assert get_gpu("h200").origin == f"your --gpu-spec file {other}"
    with pytest.raises(KvscopeError):
        get_gpu("x1")
