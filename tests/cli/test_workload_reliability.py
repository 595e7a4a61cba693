"""``kvscope workload`` on hostile input (issue #20): exit 2, one stderr line, no traceback,
no file quoted, no earlier output replaced without ``--force``."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cli_helpers import one_error_line, run_in_process

Capsys = pytest.CaptureFixture[str]


def error_line(argv: list[str], capsys: Capsys) -> str:
    """``kvscope ARGV`` in this process must end in one error line (exit 2): that line."""
    code, _, err = run_in_process(argv, capsys)
    return one_error_line(code, err)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    f = tmp_path
    (f / "overflow.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,99999999999999999999999,10\n"
    )
    (f / "overflow.jsonl").write_text(
        '{"timestamp": 0, "input_length": 1e30, "output_length": 5}\n'
    )
    (f / "ok.csv").write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        + "".join(f"2023-11-16 18:15:{i:02d}.0000000,{100 + i},{20 + i}\n" for i in range(20))
    )
    (f / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (f / "empty.csv").write_bytes(b"")
    (f / "latin1.csv").write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\ncaf\xe9,1,2\n")
    (f / "adir").mkdir()
    (f / "shadow").write_text("root:$6$SECRETHASH:19000:0:99999:7:::\n")
    (f / "shared").mkdir()
    (f / "shared" / "spec.yaml").write_text(
        f"arrival: poisson:rate=5\nnum_requests: 5\nprompt_len: empirical:{f / 'shadow'}\n"
    )
    return f


@pytest.mark.parametrize("name", ["overflow.csv", "overflow.jsonl"])
def test_stats_on_a_count_beyond_int64(files: Path, name: str, capsys: Capsys) -> None:
    line = error_line(["workload", "stats", str(files / name)], capsys)
    assert f"{name}:" in line and "must be <=" in line
    code, _, err = run_in_process(
        ["workload", "stats", str(files / name), "--skip-bad", "--json"], capsys
    )
    assert code == 0 and "skipped 1 malformed row" in err


@pytest.mark.parametrize("block_size", ["-16", "0"])
def test_stats_block_size_must_be_positive(files: Path, block_size: str, capsys: Capsys) -> None:
    line = error_line(
        ["workload", "stats", str(files / "ok.csv"), f"--block-size={block_size}"], capsys
    )
    assert "--block-size must be >= 1" in line


def test_a_spec_naming_a_private_file_does_not_read_it(files: Path, capsys: Capsys) -> None:
    spec = str(files / "shared" / "spec.yaml")
    for cmd in (["workload", "stats", spec], ["workload", "generate", "--workload", spec]):
        argv = cmd + (["--out", str(files / "w.jsonl")] if "generate" in cmd else [])
        line = error_line(argv, capsys)
        assert "outside its own folder" in line and "SECRET" not in line


def test_an_unrecognised_file_is_named_not_quoted(files: Path, capsys: Capsys) -> None:
    line = error_line(["workload", "stats", str(files / "shadow")], capsys)
    assert "not a recognised trace format" in line
    assert "SECRET" not in line and "$6$" not in line


@pytest.mark.parametrize(
    ("name", "fmt", "message"),
    [
        ("binary.bin", None, "binary file"),
        ("binary.bin", "mooncake", "binary file"),
        ("empty.csv", None, "empty"),
        ("empty.csv", "sharegpt", "empty"),
        ("adir", None, "no *.json trace files"),
        ("adir", "azure", "is a directory"),
        ("adir", "kvscope", "is a directory"),
        ("latin1.csv", None, "not UTF-8"),
        ("latin1.csv", "azure", "not UTF-8"),
    ],
)
@pytest.mark.parametrize("command", ["stats", "convert"])
def test_files_that_are_not_traces(
    files: Path, name: str, fmt: str | None, message: str, command: str, capsys: Capsys
) -> None:
    argv = ["workload", command, str(files / name)]
    argv += ["--out", str(files / "c.jsonl")] if command == "convert" else []
    argv += ["--format", fmt] if fmt else []
    assert message in error_line(argv, capsys)
    assert not (files / "c.jsonl").exists()


def test_generate_refuses_a_huge_stream_quickly(files: Path, capsys: Capsys) -> None:
    start = time.monotonic()
    for extra in (
        ["--arrival", "poisson:rate=1000000000", "--duration", "1000000"],
        ["--arrival", "poisson:rate=10", "--num-requests", str(10**15)],
        ["--arrival", "concurrency:n=4", "--num-requests", str(10**15)],
    ):
        line = error_line(["workload", "generate", *extra, "--out", str(files / "w.jsonl")], capsys)
        assert "limit of 100,000,000" in line
    assert time.monotonic() - start < 20
    assert not (files / "w.jsonl").exists()


@pytest.mark.parametrize(
    "arrival",
    [
        "poisson:rate=nan",
        "poisson:rate=-1",
        "poisson:rate=0",
        "gamma:rate=10,cv=inf",
        "concurrency:n=1e30",
    ],
)
def test_bad_arrival_strings(files: Path, arrival: str, capsys: Capsys) -> None:
    out = str(files / "w.jsonl")
    error_line(
        ["workload", "generate", "--arrival", arrival, "--num-requests", "5", "--out", out],
        capsys,
    )


@pytest.mark.parametrize(
    "extra",
    [
        ["--prompt-len", "mix:1.5@128"],
        ["--prompt-len", "lognormal:median=-1,sigma=1"],
        ["--output-len", "99999999999999999999999"],
        ["--speedup", "0"],
        ["--speedup", "-2"],
        ["--duration", "0"],
        ["--seed", "-1"],
    ],
)
def test_bad_length_and_flag_values(files: Path, extra: list[str], capsys: Capsys) -> None:
    error_line(
        [
            "workload",
            "generate",
            "--arrival",
            "poisson:rate=5",
            "--num-requests",
            "5",
            *extra,
            "--out",
            str(files / "w.jsonl"),
        ],
        capsys,
    )


@pytest.mark.parametrize("command", ["generate", "convert"])
def test_out_is_never_replaced_without_force(files: Path, command: str, capsys: Capsys) -> None:
    out = files / "precious.jsonl"
    out.write_text("a result someone kept\n")
    argv = (
        ["workload", "generate", "--arrival", "poisson:rate=5", "--num-requests", "5"]
        if command == "generate"
        else ["workload", "convert", str(files / "ok.csv")]
    ) + ["--out", str(out)]
    line = error_line(argv, capsys)
    assert "already exists" in line and "--force" in line
    assert out.read_text() == "a result someone kept\n"
    code, _, err = run_in_process([*argv, "--force"], capsys)
    assert code == 0, err
    assert out.read_text().startswith('{"request_id"')
    assert not list(files.glob("*.tmp"))


@pytest.mark.parametrize("out", ["w.txt", "adir", "binary.bin/under-a-file.jsonl"])
def test_out_is_checked_before_the_work(files: Path, out: str, capsys: Capsys) -> None:
    line = error_line(
        ["workload", "convert", str(files / "ok.csv"), "--out", str(files / out)], capsys
    )
    assert str(files / out) in line


def test_a_uri_like_out_is_a_local_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Capsys
) -> None:
    # pyarrow reads "file:/x" as a URI: the old writer put the file at /x (and then failed)
    name = f"kvscope-test-{tmp_path.name}.parquet"
    monkeypatch.chdir(tmp_path)
    gen = ["workload", "generate", "--arrival", "poisson:rate=5", "--num-requests", "5"]
    code, _, err = run_in_process([*gen, "--out", f"file:/{name}"], capsys)
    assert code == 0, err
    assert not Path(f"/{name}").exists() and not Path(f"/{name}.tmp").exists()
    assert (tmp_path / "file:" / name).is_file()
    code, out, err = run_in_process(["workload", "stats", f"file:/{name}", "--json"], capsys)
    assert code == 0 and '"requests": 5' in out, err


def test_a_name_too_long_is_one_line(files: Path, capsys: Capsys) -> None:
    long = str(files / ("x" * 300))
    error_line(["workload", "stats", long + ".csv"], capsys)
    gen = ["workload", "generate", "--arrival", "poisson:rate=5", "--num-requests", "5"]
    error_line([*gen, "--out", long + ".jsonl"], capsys)
