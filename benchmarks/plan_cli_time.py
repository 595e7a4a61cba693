"""Wall time of `kvscope plan ... --json` as a user runs it (fresh interpreter, imports included).

Run: PYTHONPATH=src python benchmarks/plan_cli_time.py   (target: < 0.5 s per call)

Prints wall time and the child's CPU time (user + sys): on a shared machine the wall time
includes waiting for a core, the CPU time does not.
"""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time

CASES = [
    ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"],
    ["--model", "deepseek-ai/DeepSeek-V3", "--gpu", "H200", "--tp", "8"],
    [
        "--model",
        "deepseek-ai/DeepSeek-V4-Flash",
        "--gpu",
        "H100",
        "--tp",
        "8",
        "--enable-expert-parallel",
        "--max-model-len",
        "262144",
    ],
]


def main() -> None:
    env = {**os.environ}
    for args in CASES:
        times, cpu = [], []
        for _ in range(5):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "kvscope.cli.main", "plan", *args, "--json"],
                check=True,
                capture_output=True,
                env=env,
            )
            times.append(time.perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        print(
            f"{' '.join(args)}: wall median {statistics.median(times):.3f} s "
            f"(max {max(times):.3f}), CPU median {statistics.median(cpu):.3f} s, "
            f"{len(times)} runs; load average {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
