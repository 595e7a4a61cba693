"""End-to-end fidelity loop on CPU: bench llama-server at several loads, calibrate on one,
simulate the others with ``--engine llama.cpp``, and compare latency percentiles.

    PYTHONPATH=src python benchmarks/fidelity_llama_server.py [--rates 2,4,6] [--fit-rate 4]
        [--num-requests 120] [--model-size small|tiny] [--nice -20] [--json OUT.json]

What it does:

1. writes a random-weight Llama GGUF of ``tests/llama_cpp.py`` (by default the small shape,
   4.3 M parameters, whose steps are compute, not the server's per-step host work) and the
   matching Hugging Face ``config.json`` (so the simulator's cost model sees the same
   architecture), and a ``--gpu-spec`` file describing the CPU as a "GPU" (its figures only
   set the scale; the fit's MFU, MBU and overhead absorb them);
2. starts ``llama-server -np SLOTS -c CTX -b N_BATCH -t THREADS --metrics`` (pinned thread
   count: ``-t``, no prompt cache: ``--no-cache-prompt``), warms it up, and runs ``kvscope
   bench`` with the same workload (one seed) once per Poisson rate. The server and the load
   generator run above every other process (``--nice``; -20 means the real-time FIFO class
   where the user may set it, as root can): on a shared machine the other processes otherwise
   take the server's core mid-step, and that noise swamped the model;
3. ``kvscope.sim.calibrate.calibrate_runs`` fits on the ``--fit-rate`` run and scores the fit on
   every other run by replaying its arrivals, prompts and outputs;
4. measures the fit level a second time, the same requests at the same times (the noise
   floor), and prints level, metric, percentile, measured, simulated, error.

llama-server comes from ``tests/llama_cpp.py::llama_server_binary`` ($KVSCOPE_LLAMA_SERVER, the
``make install-test`` build cache, else PATH).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

#: The CPU as a catalogue entry: figures of one x86 core running f32 matmuls (order of
#: magnitude only; the calibration fits the efficiencies and the per-step overhead). The small
#: model's 17 MB of weights stay in the last-level cache between steps, so the "memory"
#: bandwidth is the cache's (~100 GB/s a core), not DRAM's: with DRAM's 20 GB/s the fit pinned
#: its bandwidth efficiency at the bound of 1.
CPU_GPU = "CPU-LLAMA-SERVER"
GPU_YAML = f"""gpus:
  - name: {CPU_GPU}
    memory_total_bytes: 8000000000
    hbm_bandwidth_gbps: 100
    bf16_dense_tflops: 0.1
    pcie_gbps_per_direction: 10
"""


def write_model(work: Path, size: str = "small") -> tuple[Path, Path, Path]:
    """The GGUF, its config.json twin, and the CPU gpu-spec file."""
    from llama_cpp import CTX, SMALL, TINY, vocabulary, write_tiny_llama

    shape = SMALL if size == "small" else TINY
    gguf = write_tiny_llama(work / f"{size}-llama.gguf", shape=shape)
    tokens, _, _ = vocabulary()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.dim,
        "num_hidden_layers": shape.layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "intermediate_size": shape.ff,
        "vocab_size": len(tokens),
        "max_position_embeddings": CTX,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
    }
    (work / "model").mkdir(exist_ok=True)
    cfg = work / "model" / "config.json"
    cfg.write_text(json.dumps(config))
    gpus = work / "gpus.yaml"
    gpus.write_text(GPU_YAML)
    return gguf, cfg, gpus


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _prioritised(nice: int) -> Any:
    """A ``preexec_fn`` that lowers the child's nice value to ``nice`` where allowed.

    The server and the load generator are the system under test: on a shared machine, raising
    their priority above the other processes' keeps those from stealing the server's core in the
    middle of a step (the noise that swamped the first measurements). An unprivileged user
    cannot go below 0; the child then runs at its inherited priority and the run records it.
    """

    def apply() -> None:
        try:
            if nice <= -20:
                # below nice's floor: the real-time FIFO class (priority 1, the lowest), which
                # any normal process yields to at once; the kernel's RT throttling still
                # leaves the rest of the machine 5 % of each second
                os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
            else:
                os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError:
            pass

    return apply


def start_server(
    binary: Path, gguf: Path, slots: int, ctx: int, n_batch: int, threads: int, nice: int = 0
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [
        str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--metrics",
        "-np", str(slots), "-c", str(ctx), "-b", str(n_batch), "-t", str(threads),
        "-tb", str(threads), "--threads-http", str(slots + 4), "--cache-ram", "0",
        "--no-cache-prompt",
        "--no-warmup",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_prioritised(nice)
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("llama-server did not become healthy in 60 s")


def bench(url: str, out: Path, arrival: str, args: argparse.Namespace, n: int, seed: int) -> None:
    cmd = [
        sys.executable, "-m", "kvscope.cli.main", "bench", "--url", url, "--model", "tiny",
        "--out", str(out), "--arrival", arrival, "--num-requests", str(n),
        "--prompt-len", args.prompt_len, "--output-len", args.output_len,
        "--seed", str(seed), "--scrape-interval", "0.25", "--json",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=600,
        preexec_fn=_prioritised(args.nice),
    )  # fmt: skip
    if r.returncode not in (0, 1):
        raise RuntimeError(f"kvscope bench failed ({r.returncode}): {r.stderr.strip()[-400:]}")


def run_loop(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    from kvscope.sim import SimConfig
    from kvscope.sim.calibrate import calibrate_runs
    from kvscope.specs.user_gpus import use_gpu_file
    from llama_cpp import llama_server_binary

    binary = Path(args.server) if args.server else llama_server_binary()
    if binary is None:
        raise SystemExit("llama-server not found (make install-test builds it)")
    gguf, model_cfg, gpus = write_model(work, args.model_size)
    rates = [float(r) for r in args.rates.split(",")]
    proc, url = start_server(
        binary, gguf, args.slots, args.ctx, args.n_batch, args.threads, args.nice
    )
    server_nice: int | str = os.getpriority(os.PRIO_PROCESS, proc.pid)
    if os.sched_getscheduler(proc.pid) == os.SCHED_FIFO:
        server_nice = "SCHED_FIFO"
    runs: dict[float, Path] = {}
    t0 = time.monotonic()
    try:
        # page in and warm up; then the same workload (one seed: the same prompts, output
        # lengths and Poisson draws, the gaps scaled by the rate) once per level. The server
        # runs with --no-cache-prompt, so a prompt seen before is computed again, as the
        # simulator's llama.cpp mode assumes; the levels then differ in their rate alone
        bench(url, work / "warmup", f"poisson:rate={rates[0]}", args, 16, args.seed + 100)
        for rate in rates:
            runs[rate] = work / f"rate-{rate:g}"
            bench(url, runs[rate], f"poisson:rate={rate:g}", args, args.num_requests, args.seed)
        # the fit level again, the very same requests at the very same times: how far two
        # measurements of one load disagree is the floor no model can beat
        fit_rate = float(args.fit_rate) if args.fit_rate else rates[len(rates) // 2]
        repeat = work / "repeat"
        bench(url, repeat, f"poisson:rate={fit_rate:g}", args, args.num_requests, args.seed)
    finally:
        proc.kill()
        proc.wait()
    bench_s = time.monotonic() - t0
    use_gpu_file(str(gpus))
    cfg = SimConfig(
        engine="llama.cpp",
        model=str(model_cfg),
        gpu=CPU_GPU,
        max_num_seqs=args.slots,
        ctx_size=args.ctx,
        max_num_batched_tokens=args.n_batch,
        enable_prefix_caching=False,
    )
    held = [runs[r] for r in rates if r != fit_rate]
    t1 = time.monotonic()
    cal = calibrate_runs([runs[fit_rate]], cfg, holdout=held, scratch=work)
    rows = []
    for (_label, score), rate in zip(cal.scores, [r for r in rates if r != fit_rate], strict=True):
        for metric, pct, meas, sim in score.rows:
            rows.append(
                {
                    "rate": rate,
                    "metric": metric,
                    "percentile": pct,
                    "measured_s": meas,
                    "simulated_s": sim,
                    "error": sim / meas - 1.0 if meas > 0 else None,
                }
            )
    noise = repeat_noise(runs[fit_rate], repeat)
    return {
        "fit_rate": fit_rate,
        "noise": noise,
        "load_average": os.getloadavg(),
        "rates": rates,
        "coefficients": {
            k: getattr(cal.coefficients, k)
            for k in ("overhead_s", "mfu", "mbu", "decode_token_s", "request_s", "source")
        },
        "tpot_mape_in_sample": cal.report["tpot_mape"],
        "bench_s": bench_s,
        "calibrate_s": time.monotonic() - t1,
        "server": {
            "binary": str(binary),
            "slots": args.slots,
            "ctx": args.ctx,
            "n_batch": args.n_batch,
            "threads": args.threads,
            "model_size": args.model_size,
            "nice": server_nice,
        },
        "rows": rows,
    }


def repeat_noise(a: Path, b: Path) -> list[dict[str, Any]]:
    """Measured percentiles of two runs of the same load: ``b / a - 1`` per metric."""
    import numpy as np

    from kvscope.sim.calibrate import load_requests
    from kvscope.sim.holdout import METRICS, PERCENTILES, measured_latencies

    ma = measured_latencies(a, load_requests(a))
    mb = measured_latencies(b, load_requests(b))
    out = []
    for m in METRICS:
        for p in PERCENTILES:
            va = ma[m][np.isfinite(ma[m])]
            vb = mb[m][np.isfinite(mb[m])]
            if va.size and vb.size:
                x, y = float(np.percentile(va, p)), float(np.percentile(vb, p))
                out.append({"metric": m, "percentile": p, "first_s": x, "repeat_s": y,
                            "diff": y / x - 1.0})  # fmt: skip
    return out


def print_table(res: dict[str, Any]) -> None:
    c = res["coefficients"]
    print(
        f"fit on rate {res['fit_rate']:g}/s: overhead {c['overhead_s'] * 1e3:.3f} ms, "
        f"MFU {c['mfu']:.3g}, MBU {c['mbu']:.3g}, per decoded token "
        f"{c['decode_token_s'] * 1e6:.1f} us, per request {c['request_s'] * 1e3:.2f} ms "
        f"(bench {res['bench_s']:.0f} s, "
        f"calibrate {res['calibrate_s']:.1f} s)"
    )
    print(f"{'level':>8} {'metric':<6} {'pct':>4} {'measured':>11} {'simulated':>11} {'error':>8}")
    for r in res["rows"]:
        err = "n/a" if r["error"] is None else f"{r['error']:+.1%}"
        print(
            f"{r['rate']:>6g}/s {r['metric']:<6} {'P' + str(r['percentile']):>4} "
            f"{r['measured_s'] * 1e3:>9.2f}ms {r['simulated_s'] * 1e3:>9.2f}ms {err:>8}"
        )
    srv = res["server"]
    print(f"server: {srv['model_size']} model, -np {srv['slots']} -t {srv['threads']}, "
          f"nice {srv['nice']}")  # fmt: skip
    print(f"noise floor: rate {res['fit_rate']:g}/s measured twice (load average "
          f"{', '.join(f'{x:.1f}' for x in res['load_average'])})")  # fmt: skip
    for r in res["noise"]:
        print(
            f"{'repeat':>8} {r['metric']:<6} {'P' + str(r['percentile']):>4} "
            f"{r['first_s'] * 1e3:>9.2f}ms {r['repeat_s'] * 1e3:>9.2f}ms {r['diff']:>+8.1%}"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="2,4,6", help="Poisson rates (req/s), one run each")
    ap.add_argument("--fit-rate", default=None, help="the rate to fit on (default: the middle)")
    ap.add_argument("--num-requests", type=int, default=120)
    ap.add_argument("--prompt-len", default="uniform:min=32,max=256")
    ap.add_argument("--output-len", default="uniform:min=16,max=64")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--slots", type=int, default=4, help="llama-server -np")
    ap.add_argument("--ctx", type=int, default=4096, help="llama-server -c")
    ap.add_argument("--n-batch", type=int, default=2048, help="llama-server -b")
    ap.add_argument("--threads", type=int, default=1, help="llama-server -t (pinned count)")
    ap.add_argument("--server", default=None, help="llama-server binary")
    ap.add_argument(
        "--model-size", choices=("small", "tiny"), default="small",
        help="random Llama to serve: small (4.3 M parameters, compute-bound steps) or tiny",
    )  # fmt: skip
    ap.add_argument(
        "--nice", type=int, default=-20,
        help="nice value for llama-server and the load generator (below 0 needs root; "
        "-20 or less: the real-time FIFO class)",
    )  # fmt: skip
    ap.add_argument("--work", default=None, help="keep the run directories here")
    ap.add_argument("--json", default=None, help="also write the figures as JSON here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    if args.work:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        res = run_loop(args, work)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            res = run_loop(args, Path(tmp))
    print_table(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
