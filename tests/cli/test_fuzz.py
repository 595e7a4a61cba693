"""The CLI fuzzer: every command, hostile flag values and input files, one contract.

For each leaf command of the ``kvscope`` tree (found by walking the parser, so a new command
or flag is fuzzed without touching this file) Hypothesis draws a few options and gives each a
hostile value — NaN, ±inf, zero, negatives, beyond int64, garbage strings, credentials in URLs,
and paths to truncated, binary, non-UTF-8, empty, foreign or adversarial files, directories and
an earlier run that must not be clobbered — on top of a valid base invocation. Each input runs
as a real process (forked from a warm interpreter, ``fuzz_server.py``) in a fresh sandbox and
must keep the contract of issue #20:

- exit code 0, 2, or 1 where a run completed but obtained none of what it was asked for;
- exit 2 prints exactly one line on stderr, ``kvscope: error: ...``; no traceback ever;
- it ends within its time limit (no hang);
- no file of the sandbox changes unless it was named as an output (``--out``, ``--store``) —
  an earlier run is never overwritten without ``--force`` — and nothing is written elsewhere;
- the planted API key and URL password appear in no file written and in no output.

Seeded (``derandomize``) and bounded by example counts per command, so CI sees the same inputs
on every run; ``KVSCOPE_FUZZ_SCALE`` multiplies the counts for a longer local session. The
audit's own cases (``CORPUS``) run first, every time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.slow, pytest.mark.integration]

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "telemetry" / "fixtures"
SCALE = float(os.environ.get("KVSCOPE_FUZZ_SCALE", "1"))

PASSWORD = "PASS-planted-7731"
API_KEY = "sk-planted-0123456789abcdefXYZ"
SECRETS = (PASSWORD, API_KEY)
CRED_URL = f"http://fuzzuser:{PASSWORD}@127.0.0.1:9"

# ---------------------------------------------------------------------------- the fork server


class Forker:
    """The warm interpreter that forks one child per input."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(HERE.parents[1] / "src")}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "fuzz_server.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stdout is not None
        ready = json.loads(self.proc.stdout.readline())
        assert ready["ready"], ready
        #: Whether the children run where only /tmp is writable (root in a private mount
        #: namespace, or not root at all): only then may outputs be offered escaping paths.
        self.contained = bool(ready["jailed"]) or os.geteuid() != 0

    def run(self, argv: list[str], cwd: Path, timeout_s: float) -> dict[str, object]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        env = {
            "HOME": str(cwd / "home"),
            "XDG_CACHE_HOME": str(cwd / "home" / ".cache"),
            "HF_HUB_OFFLINE": "1",
            "COLUMNS": "80",
            "OPENAI_API_KEY": API_KEY,
            "NO_COLOR": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        req = {"argv": argv, "cwd": str(cwd), "env": env, "timeout_s": timeout_s}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply: dict[str, object] = json.loads(self.proc.stdout.readline())
        return reply

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    f = Forker()
    yield f
    f.close()


# ---------------------------------------------------------------------------- the corpus


def _write(p: Path, data: bytes | str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data.encode() if isinstance(data, str) else data)


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def _config(**over: object) -> str:
    return json.dumps({**LLAMA, **over})


def build_corpus(root: Path, forker: Forker) -> Path:
    """Files that make a bad day: every one is a plausible thing for a user to pass."""
    f = root / "files"
    _write(f / "empty.txt", b"")
    _write(f / "binary.bin", bytes(range(256)) * 8)
    _write(f / "latin1.txt", b"caf\xe9 \xff\xfe\nTIMESTAMP,ContextTokens,GeneratedTokens\n")
    _write(f / "truncated.json", b'{"model_type": "llama", "hidden_size": 40')
    _write(f / "list.json", b"[1, 2, 3]")
    _write(f / "nan_cfg" / "config.json", _config(hidden_size="NaN").replace('"NaN"', "NaN"))
    _write(f / "huge_cfg" / "config.json", _config(hidden_size=10**30, vocab_size=-5))
    _write(f / "layers_cfg" / "config.json", _config(num_hidden_layers=1_000_000))
    _write(f / "heads_cfg" / "config.json", _config(num_attention_heads=33))
    _write(f / "latin1_cfg" / "config.json", b'{"model_type": "llama\xe9"}')
    _write(f / "cluster_nan.yaml", "pools: [{replicas: .nan, gpu: H100, max-num-seqs: .inf}]\n")
    _write(f / "cluster_huge.yaml", "router: prefix-aware\npools: [{replicas: 1e30}]\n")
    _write(
        f / "cluster_pd.yaml",
        "kv_transfer: {link: rdma, bandwidth_gb_per_s: .inf, latency_us: -1e308}\n"
        "pools: [{role: prefill, replicas: 1e30}, {role: [decode], replicas: .nan}]\n",
    )
    _write(f / "unknown_cfg" / "config.json", _config(model_type="no-such-arch-2031"))
    _write(f / "ok_cfg" / "config.json", _config())
    _write(
        f / "bomb.yaml",
        'a: &a ["x","x","x","x","x","x","x","x","x"]\n'
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]\n"
            for i in range(8)
        ),
    )
    _write(
        f / "rules_nan.yaml",
        "rules:\n  - name: Bad\n    signal: kv_cache_usage_ratio\n    kind: threshold\n"
        "    op: '>'\n    threshold: .nan\n    for: 1m\n    tier: warning\n"
        "    summary: s\n    why: w\n",
    )
    _write(f / "rules_list.yaml", "- 1\n- 2\n")
    _write(f / "build.pkl", b"\x80\x04N}b.")
    _write(f / "garbage.parquet", b"PAR1" + bytes(range(200)) + b"PAR1")
    _write(
        f / "trace_ok.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{i:02d}.0000000,{100 + 37 * i},{20 + i}\n" for i in range(20)),
    )
    _write(
        f / "trace_overflow.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,99999999999999999999999,10\n"
        "2023-11-16 18:15:47.6805900,-5,nan\n",
    )
    _write(
        f / "trace_nan.jsonl",
        '{"timestamp": NaN, "input_length": 1e30, "output_length": -1, "hash_ids": [1]}\n',
    )
    _write(f / "spec_escape.yaml", "arrival: poisson:rate=5\nprompt_len: empirical:/etc/passwd\n")
    _write(f / "spec_nan.yaml", "arrival: poisson:rate=.nan\nnum_requests: 10\n")
    _write(f / "dmon_bad.txt", b"# gpu pwr\n# Idx W\n    0  \xff\xfe\n    0  nan\n")
    _write(f / "manifest_bad" / "manifest.json", b"{not json")
    _write(f / "precious.txt", "a result someone measured\n")
    run = f / "precious_run"
    _write(run / "summary.json", json.dumps({"kind": "bench", "config": {}, "completed": 97}))
    _write(run / "requests.parquet", b"PAR1 measured rows stand-in PAR1")
    (f / "adir").mkdir()
    import duckdb

    con = duckdb.connect(str(f / "foreign.duckdb"))
    con.execute("CREATE TABLE payroll (name VARCHAR, salary DOUBLE)")
    con.execute("INSERT INTO payroll VALUES ('a', 1.0)")
    con.close()
    # A real store, a real snapshot, a real NVML replay: made by kvscope itself.
    setup = root / "setup"
    setup.mkdir()
    made = [
        [
            "watch",
            "--nvml-replay",
            str(FIXTURES / "nvml_recording.json"),
            "--duration",
            "1.5",
            "--interval",
            "0.25",
            "--store",
            str(f / "store.duckdb"),
        ],
        ["memtrace", "generate", "--out", str(f / "snap.pickle"), "--steps", "60"],
    ]
    for argv in made:
        reply = forker.run(argv, setup, 60)
        assert reply["rc"] == 0, (argv, (setup / ".fuzz.stderr").read_text())
    shutil.copy(FIXTURES / "nvml_recording.json", f / "nvml_recording.json")
    shutil.copy(FIXTURES / "dmon_pucm.txt", f / "dmon_ok.txt")
    _write(f / "nvml_latin1.json", b'{"devices": "\xff"}')
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, forker: Forker) -> Path:
    return build_corpus(tmp_path_factory.mktemp("fuzz-corpus"), forker)


# ---------------------------------------------------------------------------- values

FLOATS = ["nan", "inf", "-inf", "-1", "0", "-0", "1e308", "1e-320", "0.5", "3", "1e30", "abc", ""]
INTS = [
    "0",
    "-1",
    "-16",
    "7",
    "1",
    "2",
    "99999999999999999999999",
    "9223372036854775807",
    "2147483648",
    "1000000000000",
    "abc",
    "1.5",
]
STRINGS = [
    "",
    " ",
    "nan",
    "-1",
    "0",
    "abc",
    "é∂漢",
    "x" * 300,
    "../../../../etc/passwd",
    CRED_URL,
    f"{CRED_URL}/v1?api_key={API_KEY}",
    "not-a-url",
    "ftp://127.0.0.1:9",
    "http://",
    "poisson:rate=nan",
    "poisson:rate=-1",
    "poisson:rate=1e12",
    "gamma:rate=10,cv=inf",
    "spike:",
    "mix:1.5@128",
    "mix:0.95@128,0.05@4096",
    "lognormal:median=-1",
    "empirical:/etc/passwd",
    "ttft_p101=1",
    "ttft_p99=nan",
    "tpot_p50=-1,e2e_p0=1",
    "max-num-seqs=0,nan",
    "block-size=7",
    "1K:1M:x0",
    "1e30",
    "0.99.0",
    "9.9.9",
    "1..2",
    "fp4",
    "auto",
    "sglang",
    "H100",
    "nonexistent-gpu",
    "deepseek-ai/DeepSeek-V4-Flash",
    "files/latin1.txt",
    "files/binary.bin",
    "files/empty.txt",
    "files/trace_overflow.csv",
    "files/trace_nan.jsonl",
    "files/spec_escape.yaml",
    "files/spec_nan.yaml",
    "files/bomb.yaml",
    "files/huge_cfg",
    "files/nan_cfg",
    "files/layers_cfg",
    "files/heads_cfg",
    "files/latin1_cfg",
    "files/unknown_cfg",
    "files/truncated.json",
    "files/adir",
    "files/precious_run",
]
PATHS = [
    "files/empty.txt",
    "files/binary.bin",
    "files/latin1.txt",
    "files/truncated.json",
    "files/list.json",
    "files/bomb.yaml",
    "files/rules_nan.yaml",
    "files/rules_list.yaml",
    "files/build.pkl",
    "files/garbage.parquet",
    "files/trace_overflow.csv",
    "files/trace_nan.jsonl",
    "files/dmon_bad.txt",
    "files/foreign.duckdb",
    "files/nvml_latin1.json",
    "files/manifest_bad",
    "files/adir",
    "files/precious.txt",
    "files/precious_run",
    "files/precious.txt/under-a-file",
    "missing/nope.json",
    "out/fresh",
]
#: Paths outside the sandbox, offered only to options that read: an output option given one
#: would write outside the sandbox (as root, over a device node), which no test may risk.
READ_ONLY_PATHS = ["/dev/zero", "/dev/null", "/proc/version"]

#: Options naming something the command writes (or may change, like a store it maintains).
OUTPUT_OPTIONS = {"out", "store", "capture", "capture_dir"}


# ---------------------------------------------------------------------------- the commands


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    base: tuple[str, ...]
    examples: int
    timeout_s: float = 25.0
    server: bool = False  # runs until stopped: a time-out is not a hang


COMMANDS = (
    Command(("plan",), ("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--json"), 60),
    Command(
        ("simulate",),
        (
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "H100",
            "--arrival",
            "poisson:rate=5",
            "--num-requests",
            "20",
            "--json",
        ),
        50,
    ),
    Command(
        ("tune",),
        (
            "--arrival",
            "poisson:rate=5",
            "--num-requests",
            "20",
            "--slo",
            "ttft_p99=1",
            "--max-gpus",
            "2",
            "--max-configs",
            "3",
            "--workers",
            "1",
            "--out",
            "out/tune",
            "--json",
        ),
        10,
    ),
    Command(("gpus",), (), 8),
    Command(("models", "show"), ("meta-llama/Llama-3.1-8B",), 15),
    Command(("workload", "stats"), ("files/trace_ok.csv",), 30),
    Command(
        ("workload", "generate"),
        ("--arrival", "poisson:rate=5", "--num-requests", "10", "--out", "out/w.jsonl"),
        30,
    ),
    Command(("workload", "convert"), ("files/trace_ok.csv", "--out", "out/c.jsonl"), 20),
    Command(("workload", "from-events"), ("files/store.duckdb", "--out", "out/e.jsonl"), 10),
    Command(
        ("bench",),
        (
            "--url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--out",
            "out/bench",
            "--num-requests",
            "2",
            "--request-timeout",
            "3",
        ),
        25,
    ),
    Command(("mock-server",), ("--port", "0"), 4, timeout_s=3.0, server=True),
    Command(
        ("watch",),
        ("--nvml-replay", "files/nvml_recording.json", "--duration", "1", "--interval", "0.5"),
        15,
    ),
    Command(("doctor",), ("--json", "--timeout", "3"), 4, timeout_s=60.0),
    Command(("report",), ("files/precious_run", "--out", "out/report.html"), 25),
    Command(("calibrate",), ("files/precious_run", "--out", "out/cost.json"), 15),
    Command(("alerts", "check"), ("--store", "files/store.duckdb"), 15),
    Command(("alerts", "list"), (), 10),
    Command(("alerts", "export"), ("--out", "out/alerts"), 10),
    Command(("dashboards", "export"), ("--out", "out/dash.json"), 8),
    Command(
        ("telemetry", "export"), ("--store", "files/store.duckdb", "--out", "out/t.parquet"), 15
    ),
    Command(("telemetry", "retain"), ("--store", "files/store.duckdb"), 15),
    Command(("dmon", "parse"), ("files/dmon_ok.txt",), 15),
    Command(("memtrace", "analyze"), ("files/snap.pickle",), 25),
    Command(("memtrace", "generate"), ("--out", "out/s.pickle", "--steps", "40"), 10),
    Command(("memtrace", "record"), ("--out", "out/r.pickle", "--max-entries", "100"), 4),
    Command(
        ("comm", "moe"),
        ("--iters", "2", "--warmup", "1", "--world-size", "2", "--tokens", "16", "--hidden", "64"),
        6,
        timeout_s=60.0,
    ),
    Command(
        ("comm", "bench"),
        ("--sizes", "1K:4K:x4", "--iters", "2", "--warmup", "1", "--timeout", "20"),
        5,
        timeout_s=60.0,
    ),
    Command(("demo",), ("--out", "out/demo"), 3, timeout_s=90.0),
)


@dataclass(frozen=True)
class Param:
    opt: str | None  # None for a positional argument
    name: str
    kind: str  # float | int | bool | path | str
    choices: tuple[str, ...] = ()
    default: object = None


def _params(path: tuple[str, ...]) -> list[Param]:
    import typer

    from kvscope.cli.main import app

    cmd = typer.main.get_command(app)
    for part in path:
        cmd = cmd.commands[part]  # type: ignore[attr-defined]
    out = []
    for p in cmd.params:
        td = p.type_descriptor
        ann = td.annotation
        origin = getattr(ann, "__origin__", None)
        inner = ann.__args__[0] if origin is list and getattr(ann, "__args__", None) else ann
        kind = {float: "float", int: "int", bool: "bool"}.get(inner, "str")
        if getattr(td, "is_path", False) or inner is Path:
            kind = "path"
        opt = None if p.param_type_name == "argument" else p.opts[0]
        choices = tuple(str(c) for c in (td.choices or ())) if td.is_choice else ()
        default = tuple(p.default) if isinstance(p.default, list) else p.default
        out.append(Param(opt, p.name or "", kind, choices, default))
    return out


def _values(p: Param, contained: bool) -> st.SearchStrategy[str]:
    if p.choices:
        return st.sampled_from([*p.choices, "no-such-choice", ""])
    pool = {"float": FLOATS, "int": INTS, "path": PATHS, "str": STRINGS}.get(p.kind, STRINGS)
    if p.name not in OUTPUT_OPTIONS:
        if p.kind in ("path", "str"):
            pool = [*pool, *READ_ONLY_PATHS]
        return st.one_of(st.sampled_from(pool), st.sampled_from(STRINGS))
    values = [*pool, *STRINGS]
    if not contained:
        # Root with writable system files: never offer an output a path out of the sandbox.
        values = [v for v in values if not v.startswith("/") and ".." not in v and "://" not in v]
    return st.sampled_from(values)


@st.composite
def invocations(
    draw: st.DrawFn, command: Command, params: list[Param], contained: bool
) -> list[str]:
    """The base invocation with one to three options replaced or added hostile values."""
    chosen = draw(st.lists(st.sampled_from(params), min_size=1, max_size=3, unique=True))
    argv = list(command.base)
    positional = [a for a in params if a.opt is None]
    for p in chosen:
        if p.kind == "bool":
            if p.opt not in argv:
                argv.append(p.opt or "")
            continue
        value = draw(_values(p, contained))
        if p.opt is None:
            # Replace the base's positional (it comes first in every base that has one).
            idx = positional.index(p)
            if idx < len(argv) and not argv[idx].startswith("-"):
                argv[idx] = value
            else:
                argv.insert(0, value)
        elif p.opt in argv:
            argv[argv.index(p.opt) + 1] = value
        else:
            argv += [p.opt, value]
    return [*command.path, *argv]


# ---------------------------------------------------------------------------- the contract


@dataclass
class Tally:
    inputs: int = 0
    findings: int = 0
    by_command: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0


TALLY = Tally()


def _snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    snap: dict[str, tuple[int, int, bytes]] = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(("home", ".fuzz.")) or not p.is_file() or p.is_symlink():
            continue
        st_ = p.stat()
        head = p.read_bytes()[:4096] if st_.st_size <= 1 << 20 else b""
        snap[rel] = (st_.st_size, st_.st_mtime_ns, head)
    return snap


def _outputs(argv: list[str], params: list[Param], sandbox: Path) -> list[Path]:
    outs = []
    for p in params:
        if p.name not in OUTPUT_OPTIONS or p.opt is None:
            continue
        if p.opt in argv and argv.index(p.opt) + 1 < len(argv):
            value = argv[argv.index(p.opt) + 1]
        elif p.default is not None and not callable(p.default):
            value = str(p.default)
        else:
            continue
        outs.append((sandbox / value).resolve())
    return outs


def _under(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def check(forker: Forker, corpus: Path, command: Command, argv: list[str]) -> None:
    try:
        _check(forker, corpus, command, argv)
    except AssertionError as err:
        TALLY.findings += 1
        # Triage mode: note every finding in a file and go on, instead of stopping at the first.
        triage = os.environ.get("KVSCOPE_FUZZ_FINDINGS")
        if not triage:
            raise
        with open(triage, "a") as fh:
            fh.write(json.dumps({"argv": argv, "finding": str(err).splitlines()[:12]}) + "\n")


def _check(forker: Forker, corpus: Path, command: Command, argv: list[str]) -> None:
    params = _params(command.path)
    sandbox = corpus.parent / f"run-{TALLY.inputs}"
    if sandbox.exists():
        shutil.rmtree(sandbox)
    shutil.copytree(corpus / "files", sandbox / "files")
    (sandbox / "home").mkdir()
    before = _snapshot(sandbox)
    start = time.monotonic()
    reply = forker.run(argv, sandbox, command.timeout_s)
    TALLY.wall_s += time.monotonic() - start
    TALLY.inputs += 1
    key = " ".join(command.path)
    TALLY.by_command[key] = TALLY.by_command.get(key, 0) + 1
    err = (sandbox / ".fuzz.stderr").read_text(errors="replace")
    out = (sandbox / ".fuzz.stdout").read_text(errors="replace")
    shown = f"kvscope {' '.join(argv)}\n--- stderr:\n{err[-3000:]}"
    rc = reply["rc"]
    if reply["timed_out"]:
        assert command.server, f"no answer within {command.timeout_s} s (a hang): {shown}"
    else:
        assert "Traceback" not in err, shown
        assert rc in (0, 1, 2), f"exit code {rc}: {shown}"
        if rc == 2:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            assert len(lines) == 1 and lines[0].startswith("kvscope: error: "), (
                f"exit 2 must print one line: {shown}"
            )
    # Nothing changed but what was named as an output; an earlier run only with --force.
    allowed = _outputs(argv, params, sandbox)
    forced = "--force" in argv
    after = _snapshot(sandbox)
    for rel, sig in before.items():
        path = (sandbox / rel).resolve()
        if after.get(rel) != sig:
            named = _under(path, allowed)
            is_run = rel.startswith("files/precious_run/")
            assert named and (forced or not is_run or rel.endswith(".duckdb")), (
                f"{rel} changed or vanished: {shown}"
            )
    for rel in after.keys() - before.keys():
        path = (sandbox / rel).resolve()
        assert _under(path, allowed), f"wrote {rel}, which no option named: {shown}"
    # No secret reaches a file, the terminal or a page.
    for p in [*sandbox.rglob("*")]:
        if p.is_file() and not p.is_symlink() and p.stat().st_size < 64 << 20:
            data = p.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, f"{secret} written to {p.name}: {shown}"
    for secret in SECRETS:
        assert secret not in out and secret not in err, f"{secret} printed: {shown}"
    shutil.rmtree(sandbox, ignore_errors=True)


# ---------------------------------------------------------------------------- the audit's cases

PLAN_8B = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"]
BENCH_DEAD = ["bench", "--url", "http://127.0.0.1:9", "--model", "m"]  # nothing on port 9
REPLAY = ["watch", "--nvml-replay", "files/nvml_recording.json", "--duration", "1"]

FLEET_BASE = ["simulate", "--arrival", "poisson:rate=5", "--num-requests", "5"]
CORPUS: list[list[str]] = [
    [*PLAN_8B, "--pipeline-parallel-size", "0"],
    ["plan", "--model", "files/huge_cfg", "--gpu", "H100"],
    ["plan", "--model", "files/latin1_cfg", "--gpu", "H100"],
    ["plan", "--model", "files/layers_cfg", "--gpu", "H100"],
    ["plan", "--model", "files/heads_cfg", "--gpu", "H100"],
    ["plan", "--model", "files/unknown_cfg", "--gpu", "H100"],
    ["plan", "--model", "files/truncated.json", "--gpu", "H100"],
    [*PLAN_8B, "--kv-cache-memory-bytes", str(93 * 2**30)],
    [*PLAN_8B, "--engine", "sglang", "--gpu-memory-utilization", "0.9"],
    [*PLAN_8B, "--mem-fraction-static", "0.8"],
    [*PLAN_8B, "--block-size", "7"],
    [*PLAN_8B, "--engine-version", "0.99.0"],
    [
        "simulate",
        "--max-model-len",
        "1000000000000",
        "--arrival",
        "poisson:rate=5",
        "--num-requests",
        "5",
    ],
    [
        "simulate",
        "--calibrate",
        "files/garbage.parquet",
        "--arrival",
        "poisson:rate=5",
        "--num-requests",
        "5",
    ],
    [
        "simulate",
        "--arrival",
        "poisson:rate=5",
        "--num-requests",
        "5",
        "--out",
        "files/precious_run",
    ],
    ["workload", "stats", "files/trace_overflow.csv"],
    ["workload", "stats", "files/trace_ok.csv", "--block-size=-16"],
    ["workload", "stats", "files/spec_escape.yaml"],
    [
        "workload",
        "generate",
        "--arrival",
        "poisson:rate=1000000000",
        "--duration",
        "1000000",
        "--out",
        "out/w.jsonl",
    ],
    ["workload", "convert", "files/latin1.txt", "--out", "out/c.jsonl"],
    [*BENCH_DEAD, "--out", "out/b", "--request-timeout", "nan"],
    ["bench", "--url", CRED_URL, "--model", "m", "--out", "out/b", "--num-requests", "2"],
    [*BENCH_DEAD, "--out", "files/precious_run", "--num-requests", "2"],
    [*BENCH_DEAD, "--out", "out/b", "--slo", "ttft_p101=1"],
    ["watch", "--exporter-port", "99999", "--duration", "1"],
    ["watch", "--duration", "nan"],
    ["watch", "--engine", "not-a-url", "--duration", "1"],
    [*REPLAY, "--out", "files/precious.txt"],
    ["watch", "--nvml-replay", "files/nvml_latin1.json", "--duration", "1"],
    [*REPLAY, "--store", "files/foreign.duckdb"],
    [*REPLAY, "--rules", "files/rules_nan.yaml"],
    [
        "telemetry",
        "retain",
        "--store",
        "files/store.duckdb",
        "--bucket",
        "nan",
        "--downsample-older-than",
        "0s",
    ],
    ["telemetry", "export", "--store", "files/foreign.duckdb", "--out", "out/t.parquet"],
    ["alerts", "list", "--rules", "files/rules_nan.yaml"],
    ["alerts", "list", "--rules", "files/latin1.txt"],
    ["alerts", "list", "--rules", "files/bomb.yaml"],
    ["dmon", "parse", "files/dmon_bad.txt"],
    ["dmon", "parse", "files/latin1.txt"],
    ["memtrace", "analyze", "files/build.pkl"],
    ["memtrace", "analyze", "files/binary.bin"],
    ["memtrace", "generate", "--out", "files/adir"],
    ["report", "files/precious_run", "--out", "files/adir"],
    ["report", "files/precious_run", "--out", "missing/dir/report.html"],
    ["doctor", "--from", "files/manifest_bad"],
    # Found by this fuzzer at KVSCOPE_FUZZ_SCALE=5, kept so they stay fixed.
    [
        "simulate",
        "--step-resolution-s",
        "1e-320",
        "--arrival",
        "poisson:rate=5",
        "--num-requests",
        "5",
    ],
    ["report", "files/precious_run", "--out", "out/r.html", "--title", CRED_URL],
    ["memtrace", "analyze", "files/snap.pickle", "--until", "-1", "--since", "1e30"],
    ["comm", "moe", "--world-size", "2", "--out", "", "--force"],
    ["comm", "moe", "--world-size", "2", "--out", ".", "--force"],
    [
        "bench",
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--out",
        "files",
        "--force",
        "--num-requests",
        "2",
    ],
    ["doctor", "--json", "--timeout", "3", "--capture", "ttft_p101=1"],
    ["doctor", "--json", "--timeout", "3", "--python", CRED_URL],
    ["report", "files/precious_run", "--out", CRED_URL, "--json"],
    ["report", "files/precious_run", "--out", CRED_URL],
    # fleet flags (issue 22): cluster files and autoscaling strings as hostile as the rest
    [*FLEET_BASE, "--cluster", "files/bomb.yaml"],
    [*FLEET_BASE, "--cluster", "files/cluster_nan.yaml"],
    [*FLEET_BASE, "--cluster", "files/cluster_huge.yaml"],
    [*FLEET_BASE, "--cluster", "files/binary.bin"],
    [*FLEET_BASE, "--cluster", "files/cluster_pd.yaml"],
    [*FLEET_BASE, "--replicas", "100000"],
    [*FLEET_BASE, "--replicas", "2", "--router-weights", "prefix=inf"],
    [*FLEET_BASE, "--replicas", "2", "--autoscale", "queue:up=nan,down=0"],
    [*FLEET_BASE, "--sweep", "replicas=0,2"],
]


def _command_of(argv: list[str]) -> Command:
    for c in sorted(COMMANDS, key=lambda c: -len(c.path)):
        if tuple(argv[: len(c.path)]) == c.path:
            return c
    raise AssertionError(argv)


@pytest.mark.parametrize("argv", CORPUS, ids=[" ".join(a)[:60] for a in CORPUS])
def test_audit_case(argv: list[str], forker: Forker, corpus: Path) -> None:
    check(forker, corpus, _command_of(argv), argv)


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c.path) for c in COMMANDS])
def test_fuzz_command(command: Command, forker: Forker, corpus: Path) -> None:
    params = _params(command.path)

    @settings(
        max_examples=max(1, round(command.examples * SCALE)),
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(invocations(command, params, forker.contained))
    def one(argv: list[str]) -> None:
        check(forker, corpus, command, argv)

    one()


def test_fuzz_record(capsys: pytest.CaptureFixture[str]) -> None:
    """Say how many inputs the fuzzer tried (the run's record)."""
    assert TALLY.inputs >= len(CORPUS)
    per = ", ".join(f"{k} {v}" for k, v in sorted(TALLY.by_command.items()))
    with capsys.disabled():
        print(
            f"\nkvscope CLI fuzzer: {TALLY.inputs} inputs over {len(TALLY.by_command)} commands "
            f"in {TALLY.wall_s:.0f} s, {TALLY.findings} findings ({per})"
        )
