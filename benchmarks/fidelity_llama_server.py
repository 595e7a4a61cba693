"""End-to-end fidelity loop on CPU: bench llama-server at several loads, calibrate on one,
simulate the others with ``--engine llama.cpp``, and compare latency percentiles.

    PYTHONPATH=src python benchmarks/fidelity_llama_server.py [--rates 2,6,12] [--fit-rate 6]
        [--num-requests 160] [--json OUT.json]

What it does:

1. writes the tiny random Llama GGUF of ``tests/llama_cpp.py`` and the matching Hugging Face
   ``config.json`` (so the simulator's cost model sees the same architecture), and a
   ``--gpu-spec`` file describing the CPU as a "GPU" (its figures only set the scale; the
   fit's MFU, MBU and overhead absorb them);
2. starts ``llama-server -np SLOTS -c CTX -b N_BATCH -t THREADS --metrics`` (pinned thread
   count: ``-t``), warms it up, and runs ``kvscope bench`` once per Poisson rate (same seed,
   prompt and output mix each time);
3. ``kvscope.sim.calibrate.calibrate_runs`` fits on the ``--fit-rate`` run and scores the fit on
   every other run by replaying its arrivals, prompts and outputs;
4. prints level, metric, percentile, measured, simulated, error.

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
#: magnitude only; the calibration fits the efficiencies and the per-step overhead).
CPU_GPU = "CPU-LLAMA-SERVER"
GPU_YAML = f"""gpus:
  - name: {CPU_GPU}
    memory_total_bytes: 8000000000
    hbm_bandwidth_gbps: 20
    bf16_dense_tflops: 0.05
    pcie_gbps_per_direction: 10
"""


def write_model(work: Path) -> tuple[Path, Path, Path]:
    """The GGUF, its config.json twin, and the CPU gpu-spec file."""
    from llama_cpp import CTX, DIM, FF, HEADS, KV_HEADS, LAYERS, vocabulary, write_tiny_llama

    gguf = write_tiny_llama(work / "tiny-llama.gguf")
    tokens, _, _ = vocabulary()
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": DIM,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": FF,
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


def start_server(
    binary: Path, gguf: Path, slots: int, ctx: int, n_batch: int, threads: int
) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    cmd = [
        str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(port), "--metrics",
        "-np", str(slots), "-c", str(ctx), "-b", str(n_batch), "-t", str(threads),
        "-tb", str(threads), "--threads-http", str(slots + 4), "--cache-ram", "0",
        "--no-warmup",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
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
    gguf, model_cfg, gpus = write_model(work)
    rates = [float(r) for r in args.rates.split(",")]
    proc, url = start_server(binary, gguf, args.slots, args.ctx, args.n_batch, args.threads)
    runs: dict[float, Path] = {}
    t0 = time.monotonic()
    try:
        # page in and warm up; then one run per level, each with its own seed: the same prompts
        # twice would be served from the slots' prompt cache
        bench(url, work / "warmup", f"poisson:rate={rates[0]}", args, 16, args.seed + 100)
        for k, rate in enumerate(rates):
            runs[rate] = work / f"rate-{rate:g}"
            bench(url, runs[rate], f"poisson:rate={rate:g}", args, args.num_requests, args.seed + k)
        # the fit level again with fresh prompts (its own seed, same lengths distribution):
        # how far two measurements of the same load disagree is the floor no model can beat
        fit_rate = float(args.fit_rate) if args.fit_rate else rates[len(rates) // 2]
        repeat = work / "repeat"
        seed = args.seed + 50
        bench(url, repeat, f"poisson:rate={fit_rate:g}", args, args.num_requests, seed)
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
            for k in ("overhead_s", "mfu", "mbu", "decode_token_s", "source")
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
        f"{c['decode_token_s'] * 1e6:.1f} us (bench {res['bench_s']:.0f} s, "
        f"calibrate {res['calibrate_s']:.1f} s)"
    )
    print(f"{'level':>8} {'metric':<6} {'pct':>4} {'measured':>11} {'simulated':>11} {'error':>8}")
    for r in res["rows"]:
        err = "n/a" if r["error"] is None else f"{r['error']:+.1%}"
        print(
            f"{r['rate']:>6g}/s {r['metric']:<6} {'P' + str(r['percentile']):>4} "
            f"{r['measured_s'] * 1e3:>9.2f}ms {r['simulated_s'] * 1e3:>9.2f}ms {err:>8}"
        )
    print(f"noise floor: rate {res['fit_rate']:g}/s measured twice (load average "
          f"{', '.join(f'{x:.1f}' for x in res['load_average'])})")  # fmt: skip
    for r in res["noise"]:
        print(
            f"{'repeat':>8} {r['metric']:<6} {'P' + str(r['percentile']):>4} "
            f"{r['first_s'] * 1e3:>9.2f}ms {r['repeat_s'] * 1e3:>9.2f}ms {r['diff']:>+8.1%}"
        )


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="4,8,16", help="Poisson rates (req/s), one run each")
    ap.add_argument("--fit-rate", default=None, help="the rate to fit on (default: the middle)")
    ap.add_argument("--num-requests", type=int, default=160)
    ap.add_argument("--prompt-len", default="uniform:min=32,max=256")
    ap.add_argument("--output-len", default="uniform:min=16,max=64")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--slots", type=int, default=4, help="llama-server -np")
    ap.add_argument("--ctx", type=int, default=4096, help="llama-server -c")
    ap.add_argument("--n-batch", type=int, default=2048, help="llama-server -b")
    ap.add_argument("--threads", type=int, default=1, help="llama-server -t (pinned count)")
    ap.add_argument("--server", default=None, help="llama-server binary")
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
