# ruff: noqa: E501  (XML lines are kept whole)
"""Parsing nvidia-smi outputs: the R550+ layout, the older layout, topo -m and nvlink -s."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvscope.doctor.nvsmi import num, parse_nvlink_status, parse_smi_xml, parse_topo
from kvscope.errors import KvscopeError

FIX = Path(__file__).parent / "fixtures"


def test_parse_h100_dump() -> None:
    log = parse_smi_xml((FIX / "healthy_h100" / "nvidia_smi_xml.xml").read_text())
    assert (log.driver_version, log.cuda_version, log.dtd) == (
        "550.54.15",
        "12.4",
        "nvsmi_device_v12.dtd",
    )
    assert len(log.gpus) == 2
    g = log.gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert g.bus_id == "00000000:18:00.0"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (
        5,
        5,
        16,
        16,
    )
    assert (g.sm_clock_mhz, g.sm_clock_max_mhz) == (345.0, 1980.0)
    assert (g.temp_c, g.temp_slowdown_c, g.tlimit_margin_c) == (31.0, 89.0, None)
    assert (g.power_limit_w, g.power_default_limit_w) == (700.0, 700.0)
    assert g.clock_events["gpu_idle"] is True
    assert g.clock_events["hw_thermal_slowdown"] is False
    assert len(g.clock_events) == 9
    assert g.ecc_volatile is not None and g.ecc_volatile.uncorrectable == 0
    assert g.retired_dbe is None  # N/A on Hopper, which remaps rows instead
    assert (g.remapped_pending, g.persistence_mode, g.mig_current) == ("No", "Enabled", "Disabled")
    assert g.fb_total_mib == 81559.0
    assert g.processes == ()


OLD = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v11.dtd">
<nvidia_smi_log>
  <driver_version>470.182.03</driver_version>
  <cuda_version>11.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:00:1E.0">
    <product_name>Tesla V100-SXM2-16GB</product_name>
    <persistence_mode>Enabled</persistence_mode>
    <clocks_throttle_reasons>
      <clocks_throttle_reason_gpu_idle>Not Active</clocks_throttle_reason_gpu_idle>
      <clocks_throttle_reason_hw_power_brake_slowdown>Active</clocks_throttle_reason_hw_power_brake_slowdown>
    </clocks_throttle_reasons>
    <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
    <ecc_errors>
      <volatile>
        <single_bit><device_memory>3</device_memory><register_file>0</register_file><total>3</total></single_bit>
        <double_bit><device_memory>1</device_memory><register_file>0</register_file><total>1</total></double_bit>
      </volatile>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>2</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>1</retired_count></double_bit_retirement>
      <pending_retirement>Yes</pending_retirement>
    </retired_pages>
    <temperature><gpu_temp>84 C</gpu_temp><gpu_temp_slow_threshold>87 C</gpu_temp_slow_threshold></temperature>
    <power_readings><power_draw>241.50 W</power_draw><power_limit>250.00 W</power_limit>
      <default_power_limit>300.00 W</default_power_limit></power_readings>
    <processes>
      <process_info><pid>4242</pid><type>C</type><process_name>python</process_name>
        <used_memory>15008 MiB</used_memory></process_info>
    </processes>
  </gpu>
</nvidia_smi_log>
"""


def test_parse_pre_r550_layout() -> None:
    from kvscope.doctor.checks.gpu import (
        check_clocks,
        check_ecc,
        check_memory_health,
        check_processes,
        check_thermal_power,
    )
    from kvscope.doctor.model import Status

    (g,) = parse_smi_xml(OLD).gpus
    assert g.clock_events == {"gpu_idle": False, "hw_power_brake_slowdown": True}
    assert g.ecc_volatile is not None
    assert (g.ecc_volatile.correctable, g.ecc_volatile.uncorrectable) == (3, 1)
    assert (g.retired_sbe, g.retired_dbe, g.retirement_pending) == (2, 1, "Yes")
    assert (g.power_limit_w, g.power_default_limit_w) == (250.0, 300.0)
    assert check_clocks(g).status is Status.FAIL  # power brake is a hardware slowdown
    assert check_ecc(g).status is Status.FAIL
    assert check_memory_health(g).summary.startswith("page retirement pending")
    tp = check_thermal_power(g)  # 84 C is within 5 C of 87 C; limit lowered to 250 of 300 W
    assert tp.status is Status.WARN
    assert "power limit lowered to 250 W of 300 W" in tp.summary
    assert check_processes(g).summary == "1 process(es) hold 14.7 GiB"


def test_malformed_xml_is_a_user_error() -> None:
    with pytest.raises(KvscopeError, match="not valid XML"):
        parse_smi_xml("<nvidia_smi_log><gpu>")
    with pytest.raises(KvscopeError, match="not <nvidia_smi_log>"):
        parse_smi_xml("<other/>")


def test_num() -> None:
    assert num("45 C") == 45.0
    assert num("16x") == 16.0
    assert num("-2 C") == -2.0
    assert num("700.00 W") == 700.0
    assert num("N/A") is None
    assert num(None) is None


def test_topo_matrix_with_escapes_and_nic() -> None:
    m = parse_topo((FIX / "healthy_h100" / "nvidia_smi_topo.txt").read_text())
    assert m.gpus == ("GPU0", "GPU1")
    assert m.cells[("GPU0", "GPU1")] == "NV18"
    assert m.cells[("GPU1", "GPU1")] == "X"
    assert m.numa_affinity == {"GPU0": "0", "GPU1": "0"}


def test_topo_typed_by_hand_with_spaces() -> None:
    text = (
        "        GPU0    GPU1    CPU Affinity\n"
        "GPU0     X      PHB     0-11\n"
        "GPU1    PHB      X      0-11\n"
    )
    m = parse_topo(text)
    assert m.cells[("GPU0", "GPU1")] == "PHB"


def test_nvlink_status() -> None:
    gpus = parse_nvlink_status((FIX / "nvlink_down" / "nvidia_smi_nvlink.txt").read_text())
    assert [g.gpu for g in gpus] == [0, 1]
    assert len(gpus[0].links) == 18
    assert gpus[0].links[0] == 26.562
    assert gpus[1].links[4] is None and gpus[1].links[5] is None
    assert sum(1 for s in gpus[1].links.values() if s) == 16


def test_thermal_fix_names_both_causes() -> None:
    from kvscope.doctor.checks.gpu import check_thermal_power

    (g,) = parse_smi_xml(OLD).gpus
    fix = check_thermal_power(g).fix
    assert (
        fix
        == "Check airflow, inlet temperature and fans; restore the 300 W limit (nvidia-smi -pl)."
    )
