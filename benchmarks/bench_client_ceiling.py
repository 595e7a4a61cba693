"""Client ceiling: the highest Poisson rate a load generator holds against one mock server.

Starts ``kvscope mock-server`` on 127.0.0.1 (20 ms to the first token, 16 tokens per answer in
one write, so the server is never the limit), then probes ascending Poisson rates with
``kvscope bench`` and, side by side against the same server, with GuideLLM (installed in a
separate virtualenv; ``--guidellm PATH``). A rate is *held* when the achieved rate is within
1 % of the requested one and the P99 dispatch lag (send − scheduled time) is under 5 ms,
with at most 1 % errors. Both clients are judged by the same estimators from their own
per-request timestamps: kvscope's ``sent_s``/``arrival_s``, GuideLLM's ``request_start``/
``targeted_start``.

    python benchmarks/bench_client_ceiling.py [--duration 10] [--rates 50,100,...]
        [--guidellm /work/guidellm-venv/bin/guidellm --guidellm-rates 25,50,...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
PROMPT_TOKENS, OUTPUT_TOKENS = 128, 16
HELD_SHORTFALL, HELD_LAG_P99_S, HELD_ERRORS = 0.01, 0.005, 0.01


NICE = 0  # niceness for the mock server and both clients (same for all; see --nice)


def _pre() -> None:
    if NICE:
        os.nice(NICE)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _judge(requested: float, achieved: float, lag99: float, err: float) -> bool:
    return (
        achieved >= requested * (1 - HELD_SHORTFALL)
        and lag99 < HELD_LAG_P99_S
        and err <= HELD_ERRORS
    )


def _rate(t: np.ndarray) -> float:
    t = np.sort(t[np.isfinite(t)])
    return float((t.size - 1) / (t[-1] - t[0])) if t.size > 1 and t[-1] > t[0] else float("nan")


def start_mock() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvscope.cli.main", "mock-server", "--port", "0",
         "--ttft", "0.02", "--output-len", str(OUTPUT_TOKENS)],
        stdout=subprocess.PIPE, text=True, env=_env(), preexec_fn=_pre,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.rsplit(" ", 1)[1].strip()


def kvscope_probe(url: str, rate: float, duration: float, out: Path) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-m", "kvscope.cli.main", "bench", "--url", url, "--model", "mock",
         "--arrival", f"poisson:rate={rate:g}", "--duration", f"{duration:g}",
         "--prompt-len", str(PROMPT_TOKENS), "--output-len", str(OUTPUT_TOKENS),
         "--seed", "1", "--out", str(out), "--json", "--max-error-rate", "1"],
        capture_output=True, text=True, env=_env(), timeout=duration * 4 + 120, check=False,
        preexec_fn=_pre,
    )  # fmt: skip
    s = json.loads(r.stdout)
    req, ach = s["requested_request_rate_per_s"], s["achieved_request_rate_per_s"]
    lag99 = s["dispatch_lag_p99_s"]
    err = s["error_rate"]
    return {
        "client": "kvscope",
        "rate": rate,
        "requested_per_s": req,
        "achieved_per_s": ach,
        "dispatch_lag_p50_ms": s["dispatch_lag_p50_s"] * 1e3,
        "dispatch_lag_p99_ms": lag99 * 1e3,
        "requests": s["requests_total"],
        "error_rate": err,
        "held": _judge(req, ach, lag99, err),
    }


def guidellm_probes(
    exe: str, url: str, rates: list[float], duration: float, workdir: Path
) -> list[dict[str, Any]]:
    """One GuideLLM run over all rates; judged from its per-request timings."""
    tok = _guidellm_tokenizer(exe, workdir)
    out = workdir / "guidellm.json"
    cmd = [
        exe, "run", "--backend", f"kind=openai_http,target={url}",
        "--profile", f"kind=poisson,rate={rates[0]:g}",
        "--override", "profile.rate", ",".join(f"{r:g}" for r in rates),
        "--constraint", f"kind=max_duration,seconds={duration:g}",
        "--data", f"kind=synthetic_text,prompt_tokens={PROMPT_TOKENS},"
        f"output_tokens={OUTPUT_TOKENS}",
        "--tokenizer", f"kind=huggingface_auto,model={tok}",
        "--output", f"kind=json,path={out}", "--disable-progress",
    ]  # fmt: skip
    t0 = time.monotonic()
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=3600, check=False, preexec_fn=_pre
    )
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"guidellm failed ({r.returncode}): {r.stderr[-2000:]}")
    print(f"guidellm run took {time.monotonic() - t0:.0f} s", file=sys.stderr)
    doc = json.loads(out.read_text())
    results = []
    for rate, b in zip(rates, doc["benchmarks"], strict=False):
        reqs = [x for k in ("successful", "incomplete", "errored") for x in b["requests"][k]]
        target = np.array([x["info"]["timings"]["targeted_start"] or np.nan for x in reqs])
        start = np.array([x["info"]["timings"]["request_start"] or np.nan for x in reqs])
        ok = (target > 1e9) & (start > 1e9)  # both stamped (unix seconds)
        lag = start[ok] - target[ok]
        req, ach = _rate(target[ok]), _rate(start[ok])
        err = len(b["requests"]["errored"]) / max(len(reqs), 1)
        lag99 = float(np.percentile(lag, 99)) if lag.size else float("nan")
        results.append(
            {
                "client": "guidellm",
                "rate": rate,
                "requested_per_s": req,
                "achieved_per_s": ach,
                "dispatch_lag_p50_ms": float(np.percentile(lag, 50)) * 1e3 if lag.size else None,
                "dispatch_lag_p99_ms": lag99 * 1e3,
                "requests": len(reqs),
                "error_rate": err,
                "held": _judge(req, ach, lag99, err),
            }
        )
    return results


def _guidellm_tokenizer(exe: str, workdir: Path) -> Path:
    """A local tokenizer folder for GuideLLM's synthetic data (it needs one; no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    sys.path.insert(0, str(REPO / "src"))
    from kvscope.bench.prompts import WORDS

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>"], show_progress=False)
    tok.train_from_iterator([" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, 200, 7)], trainer)
    tok.save(str(workdir / "tokenizer.json"))
    folder = workdir / "tok"
    py = Path(exe).parent / "python"
    code = (
        "from transformers import PreTrainedTokenizerFast as T;"
        f"T(tokenizer_file={str(workdir / 'tokenizer.json')!r}, bos_token='<s>')"
        f".save_pretrained({str(folder)!r})"
    )
    subprocess.run([str(py), "-c", code], check=True, capture_output=True, timeout=600)
    return folder


def ceiling(rows: list[dict[str, Any]]) -> float | None:
    held = [r["rate"] for r in rows if r["held"]]
    return max(held) if held else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rates", default="50,100,150,200,300,400,500,600,800")
    ap.add_argument("--guidellm", default="/work/guidellm-venv/bin/guidellm")
    ap.add_argument("--guidellm-rates", default="25,50,75,100,150,200")
    ap.add_argument("--skip-kvscope", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="niceness for server and both clients, e.g. -10 on a VM shared with other work",
    )
    args = ap.parse_args()
    global NICE
    NICE = args.nice
    work = args.out or Path(tempfile.mkdtemp(prefix="kvscope-ceiling-"))
    work.mkdir(parents=True, exist_ok=True)
    mock, url = start_mock()
    rows: list[dict[str, Any]] = []
    try:
        misses = 0
        for rate in [] if args.skip_kvscope else [float(x) for x in args.rates.split(",")]:
            row = kvscope_probe(url, rate, args.duration, work / f"kvscope_{rate:g}")
            rows.append(row)
            print(json.dumps(row), flush=True)
            misses = 0 if row["held"] else misses + 1
            if misses >= 2 and ceiling(rows):  # two misses above a held rate: done
                break
        if args.guidellm and Path(args.guidellm).exists():
            g_rates = [float(x) for x in args.guidellm_rates.split(",")]
            for row in guidellm_probes(args.guidellm, url, g_rates, args.duration, work):
                rows.append(row)
                print(json.dumps(row), flush=True)
        else:
            print(f"guidellm not found at {args.guidellm}: skipped", file=sys.stderr)
    finally:
        mock.terminate()
        mock.wait(timeout=10)
    k = ceiling([r for r in rows if r["client"] == "kvscope"])
    g = ceiling([r for r in rows if r["client"] == "guidellm"])
    print(f"\n{'client':<9} {'rate':>6} {'achieved':>9} {'lag p50 ms':>10} {'lag p99 ms':>10} "
          f"{'errors':>7} held")  # fmt: skip
    for r in rows:
        print(
            f"{r['client']:<9} {r['rate']:>6g} {r['achieved_per_s']:>9.1f} "
            f"{r['dispatch_lag_p50_ms']:>10.2f} {r['dispatch_lag_p99_ms']:>10.2f} "
            f"{r['error_rate']:>7.1%} {'yes' if r['held'] else 'no'}"
        )
    print(f"\nceiling (held within 1 %, P99 lag < 5 ms): kvscope {k} req/s, guidellm {g} req/s")
    (work / "ceiling.json").write_text(json.dumps({"rows": rows, "kvscope": k, "guidellm": g}))


if __name__ == "__main__":
    main()
