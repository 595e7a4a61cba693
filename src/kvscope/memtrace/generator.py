"""Synthetic PyTorch CUDA memory snapshots in the real on-disk format, with known answers.

The generator drives :class:`~kvscope.memtrace.caching_allocator.CachingAllocator` (a model of
PyTorch's caching allocator) through a scenario and pickles the result the way
``torch.cuda.memory._dump_snapshot`` does: a dict with ``segments`` (each with its
``blocks``), ``device_traces`` (one list of trace entries per device), ``allocator_settings``
and ``external_annotations``. Frame dicts are shared between stacks, as the producer's
``py_symbolize`` deduplicates them, so pickle writes each frame once and refers back to it.

Scenarios (all seeded with a ``random.Random(seed)`` passed in, never global state):

``steady``
    Weights loaded at start (site ``load_weights``), one KV-cache allocation (site
    ``_allocate_kv_cache``), then decode steps that allocate activations and free them, with a
    communication buffer (site ``all_reduce``) every 8 steps. No leak.
``leak``
    ``steady`` plus ``leak_bytes`` allocated every ``leak_period_s`` at site ``remember`` and
    never freed: the true slope is ``leak_bytes / leak_period_s * 60 / 1e6`` MB/min.
``fragmentation``
    Small-pool noise, ``empty_cache()``, then a deterministic pattern in the large pool:
    ten 2 MiB tensors fill a 20 MiB segment and every other one is freed (five 2 MiB holes);
    four 5 MiB tensors fill a second 20 MiB segment and the middle two are freed (one 10 MiB
    hole). Free inside reserved memory: 20 MiB, largest free block: 10 MiB, so the external
    fragmentation is exactly 1 - 10/20 = 0.5 (0.8 in the first segment, 0 in the second).
``oom``
    ``fragmentation`` on a device of ``48 MiB`` capacity, a 4 KiB temporary (which leaves a
    cached 2 MiB small segment), then a 12 MiB request: no cached block fits (largest
    10 MiB), so the allocator releases the cached segment and retries (one ``segment_free``),
    ``cudaMalloc`` of a 12 MiB segment still fails with 8 MiB free on the device, and the
    trace ends with an ``oom`` entry (``device_free`` = 8 MiB) although 20 MiB are free
    inside reserved memory: an OOM caused by fragmentation.

``flavor="legacy"`` writes the older layout (blocks carry ``history`` with ``real_size``
instead of ``requested_size`` and ``frames``; no ``time_us``; no ``allocator_settings``).
"""

from __future__ import annotations

import contextlib
import pickle
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvscope.errors import ConfigError, KvscopeError
from kvscope.memtrace.caching_allocator import (
    MIB,
    CachingAllocator,
    Entry,
    Frames,
    OutOfMemory,
)
from kvscope.validate import writable_file

Scenario = Literal["steady", "leak", "fragmentation", "oom"]
SCENARIOS: tuple[str, ...] = ("steady", "leak", "fragmentation", "oom")
GIB = 1024 * MIB
_BASE_ADDR = 0x7F0000000000


def _frame(filename: str, line: int, name: str) -> dict[str, Any]:
    return {"filename": filename, "line": line, "name": name}


# Shared frame dicts (as py_symbolize shares them). Innermost frame first, as in snapshots.
_ALLOC_CPP = [
    _frame("??", 0, "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc"),
    _frame("??", 0, "at::empty_cuda"),
]
_ROOT = [
    _frame("serve.py", 88, "main"),
    _frame("<frozen runpy>", 88, "_run_code"),
]


def _stack(*user: tuple[str, int, str]) -> Frames:
    return [*_ALLOC_CPP, *(_frame(*u) for u in user), *_ROOT]


SITES: dict[str, Frames] = {
    "weights": _stack(
        ("torch/nn/modules/module.py", 1340, "_apply"),
        ("vllm/model_executor/model_loader/default_loader.py", 269, "load_weights"),
        ("vllm/worker/model_runner.py", 1050, "load_model"),
    ),
    "kv_cache": _stack(
        ("vllm/worker/cache_engine.py", 89, "_allocate_kv_cache"),
        ("vllm/worker/worker.py", 301, "initialize_cache"),
    ),
    "activation_mlp": _stack(
        ("torch/nn/functional.py", 2380, "silu"),
        ("vllm/model_executor/layers/activation.py", 84, "forward_cuda"),
        ("vllm/worker/model_runner.py", 1710, "execute_model"),
    ),
    "activation_attn": _stack(
        ("vllm/attention/backends/flash_attn.py", 720, "forward"),
        ("vllm/worker/model_runner.py", 1710, "execute_model"),
    ),
    "comm": _stack(
        ("torch/distributed/distributed_c10d.py", 2500, "all_reduce"),
        ("vllm/distributed/communication_op.py", 14, "tensor_model_parallel_all_reduce"),
        ("vllm/worker/model_runner.py", 1710, "execute_model"),
    ),
    "leak": _stack(
        ("app/request_cache.py", 42, "remember"),
        ("app/handler.py", 17, "handle_request"),
    ),
    "pattern": _stack(("app/fragment.py", 10, "make_pattern")),
    "noise": _stack(("app/noise.py", 5, "small_temporaries")),
}
_FREE_FRAMES: Frames = _stack(("torch/_tensor.py", 1, "__del__"))


@dataclass(frozen=True)
class GeneratorConfig:
    """What to generate. ``steps`` is the number of decode steps (steady/leak)."""

    scenario: str = "steady"
    seed: int = 0
    steps: int = 500
    step_s: float = 0.02
    devices: int = 1
    capacity_bytes: int = 80 * GIB
    weight_tensors: int = 32
    kv_cache_bytes: int = 8 * GIB
    leak_bytes: int = 1 * MIB
    leak_period_s: float = 1.0
    flavor: Literal["current", "legacy"] = "current"

    def check(self) -> None:
        if self.scenario not in SCENARIOS:
            raise ConfigError(
                "generator", "scenario", f"is '{self.scenario}'", "Use " + ", ".join(SCENARIOS)
            )
        if self.steps < 1 or self.step_s <= 0 or self.devices < 1 or self.leak_period_s <= 0:
            raise ConfigError("generator", "steps/step_s/devices", "must be positive")


class _Run:
    """One device's scenario run: an allocator, a clock and a trace list."""

    def __init__(self, cfg: GeneratorConfig, device: int, rng: random.Random) -> None:
        self.cfg, self.rng = cfg, rng
        self.trace: list[Entry] = []
        capacity = 48 * MIB if cfg.scenario == "oom" else cfg.capacity_bytes
        self.alloc = CachingAllocator(
            capacity,
            _BASE_ADDR + (device << 40),
            self.trace.append,
            device,
            with_time=cfg.flavor == "current",
        )
        self.t_us = 1_764_400_000_000_000  # a wall-clock-like µs timestamp

    def malloc(self, size: int, site: str) -> int:
        self.t_us += 7
        return self.alloc.malloc(size, list(SITES[site]), self.t_us)

    def free(self, addr: int) -> None:
        self.t_us += 5
        self.alloc.free(addr, list(_FREE_FRAMES), self.t_us)

    def steady(self, leak: bool) -> None:
        cfg, rng = self.cfg, self.rng
        for _ in range(cfg.weight_tensors):
            self.malloc(rng.choice((16, 32, 64, 128)) * MIB + rng.randrange(0, 4096), "weights")
        self.malloc(cfg.kv_cache_bytes, "kv_cache")
        start_us = self.t_us
        next_leak_us = start_us + round(cfg.leak_period_s * 1e6)
        for step in range(cfg.steps):
            step_us = start_us + round(step * cfg.step_s * 1e6)
            self.t_us = max(self.t_us, step_us)
            while leak and next_leak_us <= step_us:
                self.t_us = max(self.t_us, next_leak_us)
                self.malloc(cfg.leak_bytes, "leak")
                next_leak_us += round(cfg.leak_period_s * 1e6)
            live = []
            for _ in range(rng.randint(3, 9)):
                if rng.random() < 0.5:
                    size = rng.randrange(4 * 1024, 1 * MIB)
                    site = "activation_attn"
                else:
                    size = rng.randrange(2 * MIB, 64 * MIB)
                    site = "activation_mlp"
                live.append(self.malloc(size, site))
            if step % 8 == 7:
                live.append(self.malloc(rng.choice((8, 16, 32)) * MIB, "comm"))
            for addr in reversed(live):
                self.free(addr)

    def pattern(self) -> None:
        rng = self.rng
        noise = [self.malloc(rng.randrange(512, 256 * 1024), "noise") for _ in range(24)]
        for addr in noise:
            self.free(addr)
        self.t_us += 1000
        self.alloc.release_cached(self.t_us)  # empty_cache(): only the pattern remains
        self.t_us += 50_000
        small = [self.malloc(2 * MIB, "pattern") for _ in range(10)]
        for addr in small[::2]:
            self.free(addr)
        big = [self.malloc(5 * MIB, "pattern") for _ in range(4)]
        self.free(big[1])
        self.free(big[2])

    def run(self) -> None:
        s = self.cfg.scenario
        if s in ("steady", "leak"):
            self.steady(leak=s == "leak")
        else:
            self.pattern()
            if s == "oom":
                # a cached, fully free small segment: the failing request releases it (retry)
                self.free(self.malloc(4096, "noise"))
                self.t_us += 1000
                with contextlib.suppress(OutOfMemory):
                    self.malloc(12 * MIB, "pattern")
        snap: Entry = {"action": "snapshot", "addr": 0, "size": 0, "stream": 0}
        if self.cfg.flavor == "current":
            snap["time_us"] = self.t_us + 10
        snap["frames"] = []
        self.trace.append(snap)


def generate(cfg: GeneratorConfig) -> dict[str, Any] | list[dict[str, Any]]:
    """Build the snapshot object for ``cfg`` (what ``torch.cuda.memory._snapshot`` returns)."""
    cfg.check()
    rng = random.Random(cfg.seed)
    runs = [_Run(cfg, d, rng) for d in range(cfg.devices)]
    for r in runs:
        r.run()
    legacy = cfg.flavor == "legacy"
    segments = [s for r in runs for s in r.alloc.segment_dicts(legacy=legacy)]
    snap: dict[str, Any] = {"segments": segments, "device_traces": [r.trace for r in runs]}
    if not legacy:
        # Keys of the allocator_settings dict: torch/csrc/cuda/memory_snapshot.cpp.
        snap["allocator_settings"] = {
            "PYTORCH_CUDA_ALLOC_CONF": "",
            "max_split_size": 2**64 - 1,  # SIZE_MAX: no limit (a 9-byte integer in pickle)
            "garbage_collection_threshold": 0.0,
            "expandable_segments": False,
            "roundup_power2_divisions": {},
            "release_lock_on_cudamalloc": False,
            "pinned_use_cuda_host_register": False,
            "pinned_num_register_threads": 1,
        }
        snap["external_annotations"] = []
    return snap


def write_snapshot(cfg: GeneratorConfig, path: str | Path) -> Path:
    """Generate and pickle a snapshot to ``path`` (as ``_dump_snapshot`` does); return it."""
    p = writable_file(path, "snapshot file")
    snap = generate(cfg)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        with p.open("wb") as f:
            pickle.dump(snap, f)
    except OSError as err:
        raise KvscopeError(f"{p}: cannot write the snapshot file ({err.strerror}).") from None
    return p
