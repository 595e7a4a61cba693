"""vLLM's ``--attention-backend`` (:mod:`kvscope.plan.attention_backend`): the names each
release has, the block size each backend sets, and its buffers, pinned to vLLM's code at the
releases and to logged start-ups."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvscope.errors import KvscopeError
from kvscope.plan import attention_backend as ab
from kvscope.plan.config import EngineConfig, Parallelism
from kvscope.plan.memory import MemoryPlan, plan_memory
from kvscope.specs.hardware import get_gpu
from kvscope.specs.registry import load_model

GIB = 1 << 30

#: Unpacked vLLM wheels (this machine's /tmp; skipped where absent) and the file holding the
#: backend enum in each.
WHEELS = {
    (0, 22, 0): "/tmp/vllm0.22.0/vllm/v1/attention/backends/registry.py",
    (0, 23, 0): "/tmp/vllm0.23.0/vllm/v1/attention/backends/registry.py",
    (0, 25, 0): "/tmp/vllm025/vllm/v1/attention/backends/registry.py",
    (0, 27, 0): "/tmp/vllm0.27.0/vllm/v1/attention/backends/registry.py",
    (0, 31, 0): "/tmp/vllm031/vllm/v1/attention/backends/registry.py",
    (0, 9, 2): "/tmp/vllm092/src/vllm/platforms/interface.py",
    (0, 7, 2): "/tmp/vllm072/src/vllm/platforms/interface.py",
}


def _enum_names(path: str) -> set[str]:
    tree = ast.parse(Path(path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in ("_Backend", "AttentionBackendEnum"):
            return {
                s.targets[0].id
                for s in node.body
                if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
            }
    raise AssertionError(f"no backend enum in {path}")


@pytest.mark.parametrize("release", sorted(WHEELS))
def test_names_are_the_wheels_enum(release: tuple[int, int, int]) -> None:
    """Differential check against vLLM's own enum in the unpacked wheel (CUSTOM excluded:
    a plugin's class, refused)."""
    path = WHEELS[release]
    if not Path(path).exists():
        pytest.skip(f"vLLM wheel {release} not unpacked at {path}")
    table = dict(ab.NAMES)[release]
    assert table == _enum_names(path) - {"CUSTOM"}


def test_names_by_release() -> None:
    """Engine facts: TRITON_MLA joins in 0.7.1 (absent from 0.6.4's ``_Backend``); the V4
    backends join in 0.23.0 (absent in 0.22.0); a release between read wheels takes either
    neighbour's names (0.20 has TRITON_MLA and FLASHINFER_MLA)."""
    ab.check_attention_backend("vllm", (0, 6, 4), "FLASHINFER")
    with pytest.raises(KvscopeError, match=r"not a backend of vLLM 0\.6\.4"):
        ab.check_attention_backend("vllm", (0, 6, 4), "TRITON_MLA")
    ab.check_attention_backend("vllm", (0, 7, 1), "TRITON_MLA")
    with pytest.raises(KvscopeError, match="FLASHMLA_SPARSE_DSV4"):
        ab.check_attention_backend("vllm", (0, 22, 0), "FLASHMLA_SPARSE_DSV4")
    ab.check_attention_backend("vllm", (0, 23, 0), "FLASHMLA_SPARSE_DSV4")
    for name in ("TRITON_MLA", "FLASHINFER_MLA", "CUTLASS_MLA_VLLM_V1", "flashinfer"):
        ab.check_attention_backend("vllm", (0, 20, 0), name)
    ab.check_attention_backend("vllm", (0, 40, 0), "FLASHMLA_MEGA_ATTN_DSV41")


def test_refusals() -> None:
    with pytest.raises(KvscopeError, match="vLLM only"):
        EngineConfig(engine="sglang", attention_backend="triton")
    with pytest.raises(KvscopeError, match="plugin"):
        EngineConfig(attention_backend="CUSTOM")
    with pytest.raises(KvscopeError, match="not a backend"):
        EngineConfig(engine_version="0.22.0", attention_backend="TRITON_MLAA")
    assert EngineConfig().attention_backend is None


def test_block_size_by_backend_and_release() -> None:
    """``check_and_update_config`` (cuda.py) up to 0.18, ``get_preferred_block_size(16)``
    from 0.19 (FLASHINFER_MLA's kernel sizes [32, 64] -> 32; CUTLASS_MLA [128]; FLASHMLA
    [64]; TRITON_MLA multiples of 16 -> 16)."""
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    b200, rtx = get_gpu("B200"), get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
    assert ab.block_size(v3, rtx, (0, 22, 0), None) == 16  # auto on 12.x: TRITON_MLA
    assert ab.block_size(v3, b200, (0, 22, 0), "TRITON_MLA") == 16
    assert ab.block_size(v3, b200, (0, 22, 0), "FLASHINFER_MLA") == 32
    assert ab.block_size(v3, b200, (0, 17, 0), "FLASHINFER_MLA") == 64
    assert ab.block_size(v3, b200, (0, 17, 0), "CUTLASS_MLA") == 128
    assert ab.block_size(v3, get_gpu("H100"), (0, 9, 2), "FLASHMLA_VLLM_V1") == 64
    assert ab.block_size(v3, get_gpu("H100"), (0, 9, 2), "TRITON_MLA") == 16
    # V4 keeps its 256-token pages whatever the backend
    v4 = load_model("deepseek-ai/DeepSeek-V4-Flash")
    assert ab.block_size(v4, rtx, (0, 26, 0), "FLASHMLA_SPARSE_DSV4") == 256


def test_block_size_reaches_the_plan() -> None:
    """The Kimi K2.5 DCP=8 page on 8x RTX PRO 6000 (vLLM 0.17, --attention-backend
    TRITON_MLA) logs its pool in blocks of 16 tokens, which is also the automatic choice on
    compute capability 12.x (CUTLASS MLA takes 10.x only); on a B200 the automatic choice is
    planned as CUTLASS MLA's 128 and TRITON_MLA brings 16 back. The pool's bytes do not move."""
    kimi = load_model("moonshotai/Kimi-K2-Instruct")
    rtx = get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
    named = EngineConfig(engine_version="0.17.0", attention_backend="TRITON_MLA")
    auto = EngineConfig(engine_version="0.17.0")
    par = Parallelism(tp=8, pp=2)
    assert plan_memory(kimi, rtx, par, named).block_size == 16
    assert plan_memory(kimi, rtx, par, auto).block_size == 16
    b200 = get_gpu("B200")
    on_auto = plan_memory(kimi, b200, Parallelism(tp=8), auto)
    on_triton = plan_memory(kimi, b200, Parallelism(tp=8), named)
    assert (on_auto.block_size, on_triton.block_size) == (128, 16)
    assert on_triton.kv_cache_gib == pytest.approx(on_auto.kv_cache_gib)


def test_refuses_a_backend_the_model_cannot_run() -> None:
    v3 = load_model("deepseek-ai/DeepSeek-V3")
    with pytest.raises(KvscopeError, match="needs an MLA backend"):
        plan_memory(
            v3, get_gpu("H200"), Parallelism(tp=8), EngineConfig(attention_backend="FLASH_ATTN")
        )
    llama = load_model("meta-llama/Llama-3.1-8B")
    with pytest.raises(KvscopeError, match="non-MLA backend"):
        plan_memory(
            llama, get_gpu("H100"), Parallelism(), EngineConfig(attention_backend="TRITON_MLA")
        )
    # before MLA (0.7.1) vLLM ran DeepSeek-V2's attention as heads: FlashInfer took it
    lite = load_model("deepseek-ai/DeepSeek-V2-Lite")
    eng = EngineConfig(engine_version="0.6.4", attention_backend="FLASHINFER")
    assert plan_memory(lite, get_gpu("H100"), Parallelism(), eng).kv_tokens > 0


def test_v0_flashinfer_workspace_is_in_the_profiled_peak() -> None:
    """V0's FlashInferState allocates its 256 MiB workspace in the profiling pass
    (flashinfer.py of the 0.6.4-0.7.2 wheels), so the pool loses exactly that."""
    llama = load_model("meta-llama/Llama-3.1-8B")
    h100, par = get_gpu("H100"), Parallelism()
    base = plan_memory(llama, h100, par, EngineConfig(engine_version="0.6.4"))
    fi = plan_memory(
        llama, h100, par, EngineConfig(engine_version="0.6.4", attention_backend="FLASHINFER")
    )
    assert fi.activation_peak_gib - base.activation_peak_gib == pytest.approx(0.25)
    assert base.kv_cache_gib - fi.kv_cache_gib == pytest.approx(0.25)
    v1 = EngineConfig(engine_version="0.10.1", attention_backend="FLASHINFER")
    v1_base = plan_memory(llama, h100, par, EngineConfig(engine_version="0.10.1"))
    assert plan_memory(llama, h100, par, v1).kv_cache_gib == v1_base.kv_cache_gib


def test_triton_mla_logits_workspace() -> None:
    """``TritonMLAMetadataBuilder._reserve_attn_logits_workspace`` (0.25.0): the fp32 tensor
    (max_num_seqs, heads/TP x DCP, min(next_pow2(max_model_len // 512), 2 x SMs),
    kv_lora_rank + 1); Kimi K2 (64 heads, kv_lora_rank 512) TP8 on an RTX PRO 6000 (188 SMs)
    at 128 sequences and 262,144 tokens: (128, 8, 376, 513) x 4 B. Absent in 0.23.0, where
    the logits are allocated per call; it sits beside the pool (the pool does not move)."""
    kimi = load_model("moonshotai/Kimi-K2-Instruct")
    rtx = get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
    args = (kimi, rtx, (0, 25, 0), "TRITON_MLA", 8, 1, 128, 262144)
    assert ab.outside_pool_bytes(*args) == 128 * 8 * 376 * 513 * 4
    dcp4 = (kimi, rtx, (0, 25, 0), "TRITON_MLA", 8, 4, 128, 262144)
    assert ab.outside_pool_bytes(*dcp4) == 4 * ab.outside_pool_bytes(*args)
    short = (kimi, rtx, (0, 25, 0), "TRITON_MLA", 8, 1, 128, 4096)  # 8 splits
    assert ab.outside_pool_bytes(*short) == 128 * 8 * 8 * 513 * 4
    assert ab.outside_pool_bytes(kimi, rtx, (0, 23, 0), "TRITON_MLA", 8, 1, 128, 262144) == 0
    par = Parallelism(tp=8, pp=2)
    common = dict(engine_version="0.25.0", max_model_len=262144, max_num_seqs=128)
    named = plan_memory(kimi, rtx, par, EngineConfig(attention_backend="TRITON_MLA", **common))
    auto = plan_memory(kimi, rtx, par, EngineConfig(**common))
    assert named.backend_workspace_gib * GIB == pytest.approx(128 * 8 * 376 * 513 * 4)
    assert auto.backend_workspace_gib == 0.0
    assert named.kv_cache_gib == pytest.approx(auto.kv_cache_gib)


def test_v1_flashinfer_workspace_joins_the_graph_estimate() -> None:
    """The FULL warm-up of ``profile_cudagraph_memory`` builds FlashInfer metadata on fresh
    builders, each allocating ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` (394 MiB, envs.py of
    0.22.0-0.31.0): one per attention group (gpt-oss: sliding and full groups, two)."""
    h100, par = get_gpu("H100"), Parallelism()
    for model_id, groups in (("meta-llama/Llama-3.1-8B", 1), ("openai/gpt-oss-20b", 2)):
        model = load_model(model_id)
        base = plan_memory(model, h100, par, EngineConfig(engine_version="0.22.0"))
        eng = EngineConfig(engine_version="0.22.0", attention_backend="FLASHINFER")
        fi = plan_memory(model, h100, par, eng)
        extra = groups * 394 / 1024
        assert fi.cudagraph_gib - base.cudagraph_gib == pytest.approx(extra)
        assert base.kv_cache_gib - fi.kv_cache_gib == pytest.approx(extra)
    llama = load_model("meta-llama/Llama-3.1-8B")
    for eager, version in ((True, None), (False, "0.19.0")):
        pair = [
            plan_memory(
                llama,
                h100,
                par,
                EngineConfig(engine_version=version, enforce_eager=eager, attention_backend=name),
            ).kv_cache_gib
            for name in ("FLASHINFER", None)
        ]
        assert pair[0] == pytest.approx(pair[1])


def test_mla_workspaces_by_release() -> None:
    """CUTLASS MLA's ``SM100Workspace(128 MiB)`` and 0.22/0.23 FlashInfer MLA's
    ``g_fi_workspace`` (128 MiB) are made at import, inside model loading; from 0.25.0
    FlashInfer MLA makes its workspace on the first decode, the first FULL graph warm-up
    (256 MiB when DCP returns the log-sum-exp). TRITON_MLA holds none of these."""
    v3, b200, par = load_model("deepseek-ai/DeepSeek-V3"), get_gpu("B200"), Parallelism(tp=8)

    def plan(version: str, name: str, dcp: int = 1) -> MemoryPlan:
        eng = EngineConfig(
            engine_version=version, attention_backend=name, decode_context_parallel_size=dcp
        )
        return plan_memory(v3, b200, par, eng)

    for version, name in (("0.22.0", "CUTLASS_MLA"), ("0.31.0", "CUTLASS_MLA"),
                          ("0.23.0", "FLASHINFER_MLA")):  # fmt: skip
        diff = plan(version, name).weights_gib - plan(version, "TRITON_MLA").weights_gib
        assert diff == pytest.approx(0.125)
    fi, tri = plan("0.25.0", "FLASHINFER_MLA"), plan("0.25.0", "TRITON_MLA")
    assert fi.weights_gib == pytest.approx(tri.weights_gib)
    assert fi.cudagraph_gib - tri.cudagraph_gib == pytest.approx(0.125)
    fi8, tri8 = plan("0.25.0", "FLASHINFER_MLA", 8), plan("0.25.0", "TRITON_MLA", 8)
    assert fi8.cudagraph_gib - tri8.cudagraph_gib == pytest.approx(0.25)


def _kernel_sizes(root: str, class_path: str) -> list[int] | None:
    """The literal ``get_supported_kernel_block_sizes`` of a backend class in a wheel
    (``MultipleOf(n)`` read as n); None when the method computes its answer."""
    module, cls = class_path.rsplit(".", 1)
    path = Path(root) / (module.replace(".", "/") + ".py")
    if not path.exists():
        return None
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "get_preferred_block_size":
                return None  # an override: not the generic rule
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "get_supported_kernel_block_sizes":
                body = [s for s in fn.body if not isinstance(s, ast.Expr)]
                if len(body) != 1 or not isinstance(body[0], ast.Return):
                    return None
                value = body[0].value
                if not isinstance(value, ast.List):
                    return None
                sizes = []
                for e in value.elts:
                    if isinstance(e, ast.Constant):
                        sizes.append(int(e.value))
                    elif isinstance(e, ast.Call) and isinstance(e.args[0], ast.Constant):
                        sizes.append(-int(e.args[0].value))  # MultipleOf(n): -n
                    else:
                        return None
                return sizes
    return None


@pytest.mark.parametrize("release", [(0, 22, 0), (0, 25, 0), (0, 31, 0)])
def test_preferred_block_sizes_follow_the_wheels_kernels(release: tuple[int, int, int]) -> None:
    """Differential check: for every backend of the wheel whose kernel sizes are a literal
    list, ``get_preferred_block_size(16)`` (16 when a size or multiple divides it, else the
    smallest) is what kvscope plans (for a dense MLA model on an H100, or a Llama). Sparse
    and CPU backends are left out (see the loop)."""
    path = WHEELS[release]
    if not Path(path).exists():
        pytest.skip(f"vLLM wheel {release} not unpacked at {path}")
    root = str(Path(path).parents[4])
    tree = ast.parse(Path(path).read_text())
    v3, llama, h100 = (
        load_model("deepseek-ai/DeepSeek-V3"),
        load_model("meta-llama/Llama-3.1-8B"),
        get_gpu("H100"),
    )
    checked, wrong = 0, []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == "AttentionBackendEnum"):
            continue
        for s in node.body:
            if not (isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)):
                continue
            name = s.targets[0].id
            try:
                target = ast.literal_eval(s.value)
            except ValueError:
                continue
            # sparse backends serve V3.2-style models, whose indexer keeps 64 (planned apart);
            # CPU backends do not run on the GPUs kvscope plans
            if not target or "SPARSE" in name or "DSV4" in name or name in ("CPU_ATTN", "AMX_MLA"):
                continue
            sizes = _kernel_sizes(root, target)
            if sizes is None:
                continue
            takes_16 = any((16 % -n == 0) if n < 0 else n == 16 for n in sizes)
            want = 16 if takes_16 else min(abs(n) for n in sizes)
            model = v3 if ab._is_mla_backend(name) else llama
            got = ab.block_size(model, h100, release, name)
            if got != want:
                wrong.append(f"{name}: {got} != {want}")
            checked += 1
    assert not wrong
    assert checked >= 12


def test_triton_mla_splits_follow_the_catalogues_sm_count(tmp_path: Path) -> None:
    """The split cap is 2 x the part's SMs (``num_compute_units``), read from the GPU
    catalogue: a user GPU file that gives another ``sm_count`` moves it. B300 is the public
    print's 148 SMs (``NVIDIA B300 SXM6 AC, 148 SMs``), the B200's count, not 160."""
    from kvscope.specs.hardware import set_user_gpus
    from kvscope.specs.user_gpus import use_gpu_file

    kimi = load_model("moonshotai/Kimi-K2-Instruct")
    b300 = get_gpu("B300")
    assert b300.sm_count == 148 == get_gpu("B200").sm_count
    long = (kimi, b300, (0, 25, 0), "TRITON_MLA", 8, 1, 128, 262144)
    assert ab.outside_pool_bytes(*long) == 128 * 8 * (2 * 148) * 513 * 4
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n  - name: RTX-PRO-6000-Blackwell-Server-96GB\n    sm_count: 100\n")
    try:
        use_gpu_file(str(path))
        rtx = get_gpu("RTX-PRO-6000-Blackwell-Server-96GB")
        assert rtx.sm_count == 100
        args = (kimi, rtx, (0, 25, 0), "TRITON_MLA", 8, 1, 128, 262144)
        assert ab.outside_pool_bytes(*args) == 128 * 8 * 200 * 513 * 4
    finally:
        set_user_gpus(())
