"""Which libraries a process maps, from /proc/<pid>/maps lines."""

from __future__ import annotations

# ruff: noqa: E501  (maps lines are kept whole, as the kernel prints them)
from kvscope.doctor.loader import classify, ldconfig_libraries, mapped_libraries

MAPS = """\
7f00a0000000-7f00a0200000 r--p 00000000 103:02 11   /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f00a0200000-7f00a0400000 r-xp 00200000 103:02 11   /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f00a0400000-7f00a0600000 r--p 00000000 103:02 12   /opt/venv/site-packages/nvidia/cudnn/lib/libcudnn.so.9
7f00a0600000-7f00a0800000 r--p 00000000 103:02 13   /opt/venv/site-packages/nvidia/nccl/lib/libnccl.so.2
7f00a0800000-7f00a0a00000 r--p 00000000 103:02 14   /usr/lib/x86_64-linux-gnu/libnccl.so.2.18.3 (deleted)
7f00a0a00000-7f00a0c00000 r--p 00000000 103:02 15   /usr/local/cuda/lib64/stubs/libcuda.so
7f00a0c00000-7f00a0e00000 rw-p 00000000 00:00 0
7f00a0e00000-7f00a1000000 r--p 00000000 103:02 16   /usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127
7ffd8a3e1000-7ffd8a402000 rw-p 00000000 00:00 0                          [stack]
"""


def test_mapped_libraries_dedupes_and_classifies() -> None:
    libs = mapped_libraries(MAPS)
    assert [x.path for x in libs["libcuda"]] == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "/usr/local/cuda/lib64/stubs/libcuda.so",
    ]
    assert libs["libcuda"][0].version == "550.54.15"
    assert libs["libcuda"][1].is_stub and libs["libcuda"][1].version is None
    assert [x.version for x in libs["libnccl"]] == ["2", "2.18.3"]
    assert [x.version for x in libs["libcudart"]] == ["12.4.127"]
    assert libs["libnvidia-ml"] == []


def test_classify_rejects_neighbours() -> None:
    assert classify("/x/libcudnn.so.9") is None
    assert classify("/x/libcuda_wrapper.so") is None
    assert classify("/x/libnccl-net.so") is None
    lib = classify("/usr/local/cuda-12.4/compat/libcuda.so.550.54.15")
    assert lib is not None and lib.is_compat and lib.family == "libcuda"


def test_ldconfig_resolution_groups_real_files() -> None:
    d = "/usr/lib/x86_64-linux-gnu"
    libs = ldconfig_libraries(
        {
            f"{d}/libcuda.so.1": f"{d}/libcuda.so.535.104.05",
            f"{d}/libcuda.so": f"{d}/libcuda.so.535.104.05",
        }
    )
    assert [x.version for x in libs["libcuda"]] == ["535.104.05"]
