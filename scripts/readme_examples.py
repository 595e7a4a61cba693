"""Run the README's examples and compare every figure they print with the README.

An example is a fenced block right after a marker comment::

    <!-- example: ATTRIBUTES -->
    ```
    $ kvscope plan --model ... \\
          --max-model-len 8192
    (the output the README shows)
    $ another command
    (its output)
    ```

Lines starting with ``$ `` are commands (a trailing ``\\`` continues one); the lines after a
command, up to the next command, are what the README says it prints (stdout and stderr
together). A command ending in `` &`` runs in the background for the rest of the block: when
it has ``--port N`` it is started on a free loopback port instead, the block's commands use
that port, and the port is written back as N in what they print. Commands run in bash, in a
scratch folder (``--cwd`` to choose one), with the ``kvscope`` of this interpreter's
environment first on ``PATH``, ``COLUMNS`` fixed and ``../shared`` pointing at the shared
traces when they exist. Examples run in README order in one folder, so one may read what an
earlier one wrote (the report example renders the bench run).

Attributes (space separated, ``key=value`` or ``key="value with spaces"``):

- ``id=NAME``: the example's name in messages (required).
- ``excerpt``: the README shows some lines of the output, in order; each README line is found
  in the output by its text with the numbers left out, then its numbers are compared. A line
  ``...`` marks an omission and is not compared.  Without ``excerpt`` the README shows the
  whole output and the two sequences of numbers must be equal (so wrapping a table row onto
  two lines changes nothing).
- ``columns=N``: terminal width (default 100).
- ``exit=N``: the exit status the last command must give (default 0).
- ``tol=F``: relative tolerance for measured figures (default 0: printed text equal).
- ``volatile="REGEX"``: numbers inside matches of REGEX are not compared (timings, measured
  tails). Always volatile: ISO timestamps, clock times and the wall time at the end of a line
  (``- 5.8 s``); see ``VOLATILE``.
- ``needs=shared,torch,promtool``: skipped, with the reason, when the shared traces, torch or
  Prometheus's promtool are absent.
- ``skip="REASON"``: never run here (a GPU, a live engine); listed with its reason.

Prose figures: a number in the README outside examples and inline code must appear in an
example block, or in a file named by a ``<!-- figures: PATH ... -->`` comment in its paragraph
(numbers measured elsewhere, e.g. ``benchmarks/RESULTS.md``), or match ``NOT_FIGURES``.

``--check`` runs everything and exits 1 with the first differing figure and a diff;
``--update`` rewrites the README's output lines from what the commands print now (markers,
commands and an excerpt's choice of lines stay; an excerpt line whose text changed takes the
most similar printed line); ``--only ID`` picks examples; ``--list`` shows them and why any
would be skipped.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MARKER = re.compile(r"^<!-- example:(.*?)-->\s*$")
FIGURES = re.compile(r"<!-- figures:(.*?)-->")
NUMBER = re.compile(r"(?<![A-Za-z_\d.])(?:(?<=[\s(])-)?\d+(?:,\d{3})*(?:\.\d+)?")
VOLATILE = (
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?Z?",  # timestamps
    r"\b\d\d:\d\d:\d\d\b",  # clock times
    r" - \d+(\.\d+)? s$",  # "report: ... - 5.8 s": wall time of the command
)
# Prose numbers that are not figures kvscope prints: versions, counts in names, units.
NOT_FIGURES = (
    r"Python ≥ \d+\.\d+",
    r"\d+×H\d+",
    r"\d+-core",
    r"P\d+(\.\d+)?\b",
    r"\b[Vv]\d+(\.\d+)?\b",
    r"exit code \d+",
    r"\d+/\d+/\d+",
    r"(?:vLLM|SGLang|torch|GuideLLM) \d+(?:\.\d+)*(?:-\d+(?:\.\d+)*)?",  # versions named in prose
)
NOTHING = "nothing printed now is like it"
BOX = re.compile(r"[─━═┄]+")


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)  # README lines after the command
    start: int = 0  # index in README lines of the first shown line


@dataclass
class Example:
    attrs: dict[str, str]
    steps: list[Step]
    line: int  # 1-based README line of the marker

    @property
    def name(self) -> str:
        return self.attrs.get("id", f"line {self.line}")


def parse(lines: list[str]) -> list[Example]:
    examples: list[Example] = []
    i = 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            i += 1
            continue
        attrs = {}
        for tok in shlex.split(m.group(1)):
            key, _, value = tok.partition("=")
            attrs[key] = value if _ else "1"
        if not lines[i + 1].startswith("```"):
            raise SystemExit(f"README.md:{i + 1}: an example marker must precede a ``` block")
        ex = Example(attrs, [], i + 1)
        j = i + 2
        while not lines[j].startswith("```"):
            if lines[j].startswith("$ "):
                cmd = lines[j][2:]
                while cmd.endswith("\\"):
                    j += 1
                    cmd = cmd[:-1] + " " + lines[j].strip()
                ex.steps.append(Step(cmd.strip(), [], j + 1))
            elif ex.steps:
                ex.steps[-1].shown.append(lines[j])
            j += 1
        examples.append(ex)
        i = j + 1
    return examples


def numbers(text: str, volatile: list[str]) -> list[str]:
    for pattern in volatile:
        text = re.sub(pattern, " ", text)
    return [n.replace(",", "") for n in NUMBER.findall(text)]


def skeleton(line: str, volatile: list[str]) -> str:
    for pattern in volatile:
        line = re.sub(pattern, " ", line)
    return " ".join(BOX.sub("─", NUMBER.sub("#", line)).split())


def first_difference(shown: list[str], out: list[str], vol: list[str], tol: float) -> str | None:
    """The first figure that differs, with both lines, or None when all agree."""
    a = [(n, line) for line in shown for n in numbers(line, vol)]
    b = [(n, line) for line in out for n in numbers(line, vol)]
    for (x, xl), (y, yl) in zip(a, b, strict=False):
        if not same(x, y, tol):
            return f"  README shows {x} in {xl.strip()!r}\n  printed now {y} in {yl.strip()!r}"
    if len(a) != len(b):
        return f"  README shows {len(a)} figures, the command prints {len(b)}"
    return None


def closest(key: str, out: list[str], vol: list[str]) -> int | None:
    """Index of the printed line most like an excerpt line whose text changed, if any is."""
    ratios = [difflib.SequenceMatcher(None, key, skeleton(o, vol)).ratio() for o in out]
    best = max(range(len(out)), key=ratios.__getitem__, default=None)
    return best if best is not None and ratios[best] >= 0.6 else None


def same(a: str, b: str, tol: float) -> bool:
    if a == b:
        return True
    x, y = float(a), float(b)
    return tol > 0 and abs(x - y) <= tol * max(abs(x), abs(y))


def free_port(like: str) -> int:
    """``like`` itself when free, else a free port with as many digits (tables keep widths)."""
    rng = random.Random()
    for port in [int(like)] + [
        rng.randrange(10 ** (len(like) - 1), 10 ** len(like)) for _ in range(200)
    ]:
        if port < 1024 or port > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"background server on port {port} did not start")


def shared_dir() -> Path | None:
    for c in (os.environ.get("KVSCOPE_SHARED"), REPO.parent / "shared"):
        if c and (Path(c) / "traces").is_dir():
            return Path(c)
    return None


def skip_reason(ex: Example) -> str | None:
    if "skip" in ex.attrs:
        return ex.attrs["skip"]
    for need in filter(None, ex.attrs.get("needs", "").split(",")):
        if need == "shared" and shared_dir() is None:
            return "../shared/traces is not beside this clone"
        if need == "promtool" and shutil.which("promtool") is None:
            return "promtool (Prometheus) is not installed"
        if need == "torch":
            probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
            if probe.returncode != 0:
                return "torch is not installed (see the comm section)"
    return None


def scratch() -> Path:
    root = Path(tempfile.mkdtemp(prefix="kvscope-readme-"))
    (root / "kvscope").mkdir()
    (root / "kvscope" / "tests").symlink_to(REPO / "tests")  # fixtures the examples read
    if (sd := shared_dir()) is not None:
        (root / "shared").symlink_to(sd)
    return root / "kvscope"


def run_example(ex: Example, cwd: Path) -> tuple[list[list[str]], int]:
    """Each step's printed lines (ports written back as the README's) and the last status."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "COLUMNS": ex.attrs.get("columns", "100"),
        "PYTHONUNBUFFERED": "1",
        "NO_COLOR": "1",
    }
    env.pop("FORCE_COLOR", None)
    ports: dict[str, str] = {}  # README port -> real port
    background: list[subprocess.Popen[bytes]] = []
    outputs: list[list[str]] = []
    rc = 0
    timeout = float(ex.attrs.get("timeout", "120"))
    try:
        for step in ex.steps:
            cmd = step.command
            for shown, real in ports.items():
                cmd = re.sub(rf"(?<=[:=\s]){shown}\b", real, cmd)
            if cmd.endswith("&"):
                cmd = cmd[:-1].strip()
                m = re.search(r"--port[ =](\d+)", cmd)
                if m:
                    ports[m.group(1)] = str(free_port(m.group(1)))
                    cmd = cmd[: m.start(1)] + ports[m.group(1)] + cmd[m.end(1) :]
                proc = subprocess.Popen(
                    ["bash", "-c", f"exec {cmd}"],
                    cwd=cwd,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                background.append(proc)
                if m:
                    wait_port(int(ports[m.group(1)]), proc)
                outputs.append([])
                continue
            done = subprocess.run(
                ["bash", "-c", cmd],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
            )
            text = done.stdout.decode(errors="replace")
            for shown, real in ports.items():
                text = re.sub(rf"(?<=:){real}\b", shown, text)
            out = [line.rstrip() for line in text.splitlines()]
            while out and not out[-1]:
                out.pop()
            outputs.append(out)
            rc = done.returncode
    finally:
        for proc in background:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
            proc.wait(timeout=10)
    return outputs, rc


def compare(ex: Example, outputs: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """Problems found, and each step's README lines as they should read now."""
    vol = [*VOLATILE, *filter(None, [ex.attrs.get("volatile")])]
    tol = float(ex.attrs.get("tol", "0"))
    problems: list[str] = []
    updated: list[list[str]] = []
    for step, out in zip(ex.steps, outputs, strict=True):
        shown = step.shown
        if "excerpt" not in ex.attrs:
            updated.append(out if step.shown or out else [])
            first = first_difference(shown, out, vol, tol)
            if first is not None:
                diff = difflib.unified_diff(shown, out, "README.md", "printed now", lineterm="")
                problems.append(f"$ {step.command}\n{first}\n" + "\n".join(diff))
            continue
        new, k = [], 0
        for line in shown:
            if line.strip() in ("...", "…"):
                new.append(line)
                continue
            key = skeleton(line, vol)
            hit = next((j for j in range(k, len(out)) if skeleton(out[j], vol) == key), None)
            if hit is None:
                near = closest(key, out[k:], vol)
                note = f"closest printed line: {out[k + near]!r}" if near is not None else NOTHING
                problems.append(
                    f"$ {step.command}\n  README line not printed now: {line!r}\n  {note}"
                )
                if near is None:
                    new.append(line)
                    continue
                hit = k + near  # --update takes the closest line
            k = hit + 1
            a, b = numbers(line, vol), numbers(out[hit], vol)
            if len(a) != len(b) or not all(same(x, y, tol) for x, y in zip(a, b, strict=True)):
                problems.append(f"$ {step.command}\n- {line}\n+ {out[hit]}")
            new.append(out[hit])
        updated.append(new)
    return problems, updated


def prose_problems(lines: list[str], readme: Path) -> list[str]:
    in_examples: set[float] = set()
    block_lines: set[int] = set()
    fence = False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            fence = not fence
            block_lines.add(i)
        elif fence:
            block_lines.add(i)
            in_examples.update(map(float, numbers(line, [])))
    problems = []
    paragraphs: list[list[int]] = [[]]
    for i in range(len(lines)):
        if i in block_lines or not lines[i].strip():
            paragraphs.append([])
        else:
            paragraphs[-1].append(i)
    for para in filter(None, paragraphs):
        text = " ".join(lines[i] for i in para)
        sources: set[float] = set()
        for m in FIGURES.finditer(text):
            for path in m.group(1).split():
                sources.update(map(float, numbers((readme.parent / path).read_text(), [])))
        text = re.sub(r"<!--.*?-->|`[^`]*`", " ", text)
        for pattern in NOT_FIGURES:
            text = re.sub(pattern, " ", text)
        for n in numbers(text, []):
            if float(n) not in in_examples and float(n) not in sources:
                problems.append(f"README.md:{para[0] + 1}: prose figure {n} is checked nowhere")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare; exit 1 on a difference")
    mode.add_argument("--update", action="store_true", help="rewrite README output lines")
    mode.add_argument("--list", action="store_true", help="list examples and skip reasons")
    ap.add_argument("--only", action="append", default=[], help="example id (repeatable)")
    ap.add_argument("--cwd", type=Path, help="run here instead of a scratch folder")
    ap.add_argument("--readme", type=Path, default=README, help="the page (default README.md)")
    args = ap.parse_args(argv)
    readme: Path = args.readme
    lines = readme.read_text().splitlines()
    examples = parse(lines)
    failures: list[str] = [] if args.only else prose_problems(lines, readme)
    edits: list[tuple[Step, list[str]]] = []
    cwd = args.cwd.resolve() if args.cwd else scratch()
    t0 = time.perf_counter()
    for ex in examples:
        if args.only and ex.name not in args.only:
            continue
        reason = skip_reason(ex)
        if reason is not None or args.list:
            print(f"skip {ex.name}: {reason}" if reason else f"run  {ex.name}")
            continue
        t = time.perf_counter()
        try:
            outputs, rc = run_example(ex, cwd)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            failures.append(f"[{ex.name}] could not run: {e}")
            print(f"FAIL {ex.name}: {e}")
            continue
        problems, updated = compare(ex, outputs)
        if rc != int(ex.attrs.get("exit", "0")):
            problems.append(f"exit status {rc}, README expects {ex.attrs.get('exit', '0')}")
        edits += list(zip(ex.steps, updated, strict=True))
        status = "ok  " if not problems else "FAIL"
        print(f"{status} {ex.name} ({time.perf_counter() - t:.1f} s)")
        failures += [f"[{ex.name}] {p}" for p in problems]
    if args.cwd is None:
        shutil.rmtree(cwd.parent, ignore_errors=True)
    if args.update:
        for step, new in sorted(edits, key=lambda e: -e[0].start):
            lines[step.start : step.start + len(step.shown)] = new
        readme.write_text("\n".join(lines) + "\n")
        print(f"updated {readme.name} ({len(edits)} outputs)")
    print(f"{time.perf_counter() - t0:.1f} s in all")
    for f in failures:
        print("\n" + f, file=sys.stderr)
    if args.update:
        # What --update cannot mend: a vanished line, a wrong exit status, an unchecked figure.
        failures = [
            f
            for f in failures
            if not f.startswith("[") or NOTHING in f or "exit" in f or "could not run" in f
        ]
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
