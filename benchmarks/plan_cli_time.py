"""Wall time of `kvscope plan ... --json` as a user runs it (fresh interpreter, imports included).

Run: PYTHONPATH=src python benchmarks/plan_cli_time.py   (target: < 0.5 s per call)

Prints wall time and the child's CPU time (user + sys): on a shared machine the wall time
includes waiting for a core, the CPU time does not. The last case names a Hugging Face id
that is no preset (meta-llama/Llama-3.1-8B-Instruct) with its config.json in a Hugging Face
cache folder laid out as huggingface_hub lays it out, and HF_ENDPOINT on a closed loopback
port: the cached path must answer without any request.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HUB_ID = "meta-llama/Llama-3.1-8B-Instruct"
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
    ["--model", HUB_ID, "--gpu", "H100"],
]


def _hub_cache(root: Path) -> Path:
    """A cache holding HUB_ID's config.json (the Llama-3.1-8B preset's keys) at one commit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from kvscope.specs.registry import PRESET_DIR

    raw = json.loads((PRESET_DIR / "meta-llama--Llama-3.1-8B.json").read_text())
    raw.pop("_kvscope")
    commit = "0e9e39f249a16976918f6564b8830bc894c89659"
    repo = root / ("models--" + HUB_ID.replace("/", "--"))
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text(json.dumps(raw))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return root


def main() -> None:
    hub = _hub_cache(Path(tempfile.mkdtemp(prefix="kvscope-bench-hub-")))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    env.update(HF_HUB_CACHE=str(hub), HF_ENDPOINT="http://127.0.0.1:9")  # port 9: closed
    # as an installed kvscope runs: with its bytecode cached (pip compiles a wheel's modules
    # when it installs them; a shell with PYTHONDONTWRITEBYTECODE=1 would otherwise recompile
    # every kvscope module on every call, about a quarter of the time measured)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src"), quiet=1)
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
