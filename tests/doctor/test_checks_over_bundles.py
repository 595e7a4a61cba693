"""Every check over recorded and edited host bundles gets the right verdict.

Each faulty bundle is the healthy one plus one fault (see fixtures/README.md), so the test
pins the *exact* set of non-ok findings: a check that fires on the wrong host, or stops
firing on the right one, fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.doctor import Status, doctor_offline
from kvscope.doctor.checks import GPU_CHECK_IDS

FIX = Path(__file__).parent / "fixtures"

# fixture -> {(check id, subject prefix): status} for every check that is not ok/skipped.
EXPECTED: dict[str, dict[tuple[str, str], str]] = {
    "healthy_h100": {},
    "throttled_gpu": {("gpu.clocks", "GPU 1"): "fail", ("gpu.thermal_power", "GPU 1"): "warn"},
    "pcie_x8": {("gpu.pcie", "GPU 0"): "fail"},
    "driver_older_than_runtime": {("driver.runtime", "host"): "fail"},
    "two_libcuda": {("libs.libcuda", "host"): "fail"},
    "ecc_errors": {
        ("gpu.ecc", "GPU 0"): "fail",
        ("gpu.memory_health", "GPU 0"): "fail",
        ("gpu.xid", "kernel log"): "warn",
    },
    "gpu_fell_off_bus": {("gpu.xid", "kernel log"): "fail"},
    "mig_on": {("gpu.mig", "GPU 1"): "warn"},
    "system_nccl_on_path": {("nccl.version", "host"): "warn"},
    "persistence_off": {("gpu.persistence", "GPU 0"): "warn", ("gpu.persistence", "GPU 1"): "warn"},
    "nvlink_down": {("topo.nvlink", "NVLink"): "fail"},
    "risky_env": {
        ("env.NCCL_P2P_DISABLE", "environment"): "fail",
        ("env.CUDA_LAUNCH_BLOCKING", "environment"): "fail",
        ("env.NCCL_IB_DISABLE", "environment"): "warn",
        ("env.NCCL_DEBUG", "environment"): "warn",
        ("env.PYTORCH_CUDA_ALLOC_CONF", "environment"): "warn",
        ("host.shm", "/dev/shm"): "fail",
        ("host.memlock", "limits"): "fail",
        ("host.nofile", "limits"): "warn",
    },
    "nvml_mismatch": {("driver.version", "host"): "fail"},
    "cpu_host_recorded": {("host.nofile", "limits"): "warn"},
}
EXIT = {
    "healthy_h100": 0,
    "mig_on": 1,
    "system_nccl_on_path": 1,
    "persistence_off": 1,
    "cpu_host_recorded": 1,
}


def test_every_fixture_folder_has_expectations() -> None:
    folders = {p.name for p in FIX.iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert folders == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdicts(name: str) -> None:
    report = doctor_offline(FIX / name)
    found = {}
    for c in report.checks:
        if c.status in (Status.WARN, Status.FAIL):
            key = (c.id, c.subject.split(" (")[0])
            assert key not in found, f"duplicate finding {key}"
            found[key] = c.status.value
            assert c.fix, f"{c.id} has no fix line"
            assert c.evidence, f"{c.id} has no evidence"
    assert found == EXPECTED[name]
    assert report.exit_code == EXIT.get(name, 2)


def test_healthy_host_runs_every_check_and_skips_none() -> None:
    report = doctor_offline(FIX / "healthy_h100")
    assert report.counts["skipped"] == 0
    ids = {c.id for c in report.checks}
    assert set(GPU_CHECK_IDS) <= ids
    assert {"driver.version", "driver.runtime", "libs.libcuda", "libs.nvml", "nccl.version"} <= ids
    assert {"topo.nvlink", "topo.matrix", "host.shm", "host.nofile", "host.memlock"} <= ids
    assert "gpu.xid" in ids
    # nine GPU checks for each of the two GPUs
    assert sum(c.id in GPU_CHECK_IDS for c in report.checks) == 2 * len(GPU_CHECK_IDS)


def test_cpu_host_skips_gpu_checks_but_checks_the_host() -> None:
    report = doctor_offline(FIX / "cpu_host_recorded")
    by = {c.id: c for c in report.checks}
    for cid in (*GPU_CHECK_IDS, "topo.nvlink", "topo.matrix", "driver.version"):
        assert by[cid].status is Status.SKIPPED, cid
    assert "nvidia-smi" in by["gpu.pcie"].evidence[0]
    assert by["host.shm"].status is Status.OK
    assert by["host.numa"].summary == "1 NUMA node(s)"


def test_evidence_quotes_the_captured_values() -> None:
    r = doctor_offline(FIX / "pcie_x8")
    (pcie,) = [c for c in r.by_id("gpu.pcie") if c.subject.startswith("GPU 0")]
    assert "link_width current/max: x8/x16" in pcie.evidence
    assert pcie.summary.startswith("PCIe link runs x8 of x16: 50%")
    r = doctor_offline(FIX / "driver_older_than_runtime")
    (rt,) = r.by_id("driver.runtime")
    assert "torch.version.cuda = 13.0" in rt.evidence[0]
    assert ">= 580.65.06" in rt.summary  # CUDA 13.0 GA minimum driver, release notes Table 3
    r = doctor_offline(FIX / "two_libcuda")
    (lc,) = r.by_id("libs.libcuda")
    assert sum("libcuda.so." in e for e in lc.evidence) == 2


def test_gpu_that_fell_off_the_bus() -> None:
    by = {c.id: c for c in doctor_offline(FIX / "gpu_fell_off_bus").checks}
    assert "79" in by["gpu.xid"].summary
    assert by["gpu.pcie"].status is Status.SKIPPED
    assert "Unable to determine the device handle" in by["gpu.pcie"].evidence[0]
    assert by["driver.version"].status is Status.OK  # the kernel module still answers


def test_idle_gpu_on_a_lower_pcie_generation_is_fine() -> None:
    """Links train down in generation at idle to save power; only width loss is a fault."""
    from kvscope.doctor.checks.gpu import check_pcie
    from kvscope.doctor.nvsmi import parse_smi_xml

    xml = (FIX / "healthy_h100" / "nvidia_smi_xml.xml").read_text()
    idle = parse_smi_xml(xml.replace("<current_link_gen>5<", "<current_link_gen>1<", 1)).gpus[0]
    assert check_pcie(idle).status is Status.OK
    busy_xml = xml.replace("<current_link_gen>5<", "<current_link_gen>3<", 1).replace(
        "<clocks_event_reason_gpu_idle>Active<", "<clocks_event_reason_gpu_idle>Not Active<", 1
    )
    busy = parse_smi_xml(busy_xml.replace("<gpu_util>0 %", "<gpu_util>90 %", 1)).gpus[0]
    assert check_pcie(busy).status is Status.WARN


def test_bad_bundles_are_user_errors(tmp_path: Path) -> None:
    from kvscope.errors import KvscopeError

    with pytest.raises(KvscopeError, match="no such bundle"):
        doctor_offline(tmp_path / "absent")
    with pytest.raises(KvscopeError, match="not a doctor bundle"):
        doctor_offline(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(KvscopeError, match="not a valid doctor manifest"):
        doctor_offline(tmp_path)
    (tmp_path / "manifest.json").write_text('{"schema_version": 99}')
    with pytest.raises(KvscopeError, match="newer than this"):
        doctor_offline(tmp_path)


@pytest.mark.parametrize(
    ("lines", "status"),
    [
        ("", "ok"),
        ("NVRM: Xid (PCI:0000:18:00): 13, pid=1, Graphics Exception\n", "ok"),
        ("NVRM: Xid (PCI:0000:18:00): 31, pid=1, MMU Fault\n", "ok"),
        ("NVRM: Xid (PCI:0000:18:00): 63, pid=1, Row Remapper\n", "warn"),
        ("NVRM: Xid (PCI:0000:18:00): 31, pid=1\nNVRM: Xid (PCI:0000:18:00): 48, DBE\n", "fail"),
        ("NVRM: Xid (PCI:0000:18:00): 74, pid=1, NVLink\n", "fail"),
        ("NVRM: GPU at PCI:0000:18:00: GPU-5c3d8f1e\n", "ok"),
    ],
)
def test_xid_classes(tmp_path: Path, lines: str, status: str) -> None:
    import shutil

    shutil.copytree(FIX / "healthy_h100", tmp_path / "b")
    (tmp_path / "b" / "kernel_log.txt").write_text(lines)
    (xid,) = doctor_offline(tmp_path / "b").by_id("gpu.xid")
    assert xid.status.value == status


def test_bundle_cannot_point_outside_its_folder(tmp_path: Path) -> None:
    import json
    import shutil

    shutil.copytree(FIX / "healthy_h100", tmp_path / "b")
    m = json.loads((tmp_path / "b" / "manifest.json").read_text())
    for p in m["probes"]:
        if p["name"] == "meminfo":
            p["file"] = "../../../proc/meminfo"
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(m))
    (hp,) = doctor_offline(tmp_path / "b").by_id("host.hugepages")
    assert hp.status is Status.SKIPPED
