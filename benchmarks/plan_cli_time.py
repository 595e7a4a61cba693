"""Wall time of `kvscope plan ... --json` as a user runs it (fresh interpreter, imports included).

Run: PYTHONPATH=src python benchmarks/plan_cli_time.py   (target: < 0.5 s per call)
"""

from __future__ import annotations

import os
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
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "kvscope.cli.main", "plan", *args, "--json"],
                check=True,
                capture_output=True,
                env=env,
            )
            times.append(time.perf_counter() - start)
        print(
            f"{' '.join(args)}: median {statistics.median(times):.3f} s, "
            f"max {max(times):.3f} s over {len(times)} runs"
        )


if __name__ == "__main__":
    main()
