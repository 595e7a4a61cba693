"""Drive vLLM's own v1 Scheduler on CPU with a request list; print one JSON line per step.

Runs under the oracle environment ``scripts/build_vllm_oracle.sh`` builds (vLLM 0.33.0 with
``--no-deps`` beside CPU torch); ``benchmarks/sim_vs_vllm.py`` starts it. Input (stdin, JSON):
``{"scenarios": [...]}``, each with its engine settings and its requests (prompt token ids,
arrival step, priority); all scenarios run in this one process, so vLLM is imported once.
The model "runs" by feeding back one sampled token per request whose computed tokens caught
up with its tokens (none for a partial prefill chunk), exactly what a GPU worker reports.
Sampled token ids differ between requests (derived from the request id and output index), so
two identical prompts do not share their output blocks by accident. Output: one JSON line per
step, tagged with its scenario's name, then ``{"scenario": name, "end": true}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("PYTHONHASHSEED", "0")


def tiny_model_dir(max_len: int) -> str:
    """A config-only Llama folder (no weights): vLLM needs a model config to build itself."""
    d = Path(tempfile.mkdtemp(prefix="kvscope-oracle-"))
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "vocab_size": 32000,
        "max_position_embeddings": max_len,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "float16",
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def sampled_token(request_id: str, index: int) -> int:
    """A token id unique to (request, output position): outputs never collide across requests."""
    h = hashlib.blake2b(f"{request_id}/{index}".encode(), digest_size=4).digest()
    return 10 + int.from_bytes(h, "little") % 31_000


def spec_config(spec: dict) -> object | None:
    """vLLM's SpeculativeConfig for a scenario's ``speculative`` settings, or None.

    Built field by field without its ``__post_init__`` (that would load a draft model): the
    scheduler reads only the method, k and the flags below, through SpeculativeConfig's own
    methods (``use_eagle``, ``max_num_new_slots_for_drafting``, ...) and VllmConfig's
    ``num_lookahead_tokens`` / ``num_hash_lookahead_tokens``.
    """
    sd = spec.get("speculative")
    if not sd:
        return None
    import dataclasses

    from vllm.config import SpeculativeConfig

    cfg = object.__new__(SpeculativeConfig)
    for name, f in SpeculativeConfig.__dataclass_fields__.items():
        if f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        object.__setattr__(cfg, name, value)
    object.__setattr__(cfg, "method", sd.get("method", "mtp"))
    object.__setattr__(cfg, "num_speculative_tokens", sd["num_speculative_tokens"])
    object.__setattr__(cfg, "parallel_drafting", bool(sd.get("parallel_drafting", False)))
    return cfg


def feed_spec(
    sched: object, out: object, sampled: dict[str, list[int]], spec: dict, step: int
) -> None:
    """Before ``update_from_output``: each request verifying drafts gets its accepted drafts'
    tokens after its sampled one, as kvscope decided them (``speculative.accepted``, by step
    and request id), so both engines see the very same acceptances."""
    sd = spec.get("speculative")
    if not sd:
        return
    decided = sd.get("accepted", {}).get(str(step), {})
    for rid, drafts in out.scheduled_spec_decode_tokens.items():
        toks = sampled.get(rid)
        if toks:
            n = min(int(decided.get(rid, 0)), len(drafts))
            req = sched.requests[rid]
            toks.extend(sampled_token(rid, req.num_output_tokens + 1 + i) for i in range(n))


def propose_drafts(sched: object, out: object, spec: dict) -> None:
    """After ``update_from_output``: the drafter's k proposals for every scheduled request
    (vLLM's engine core calls ``update_draft_token_ids`` after each step; the scheduler drops
    them for prefill chunks and finished requests itself)."""
    sd = spec.get("speculative")
    if not sd:
        return
    from vllm.v1.outputs import DraftTokenIds

    k = sd["num_speculative_tokens"]
    ids = list(out.num_scheduled_tokens)
    sched.update_draft_token_ids(DraftTokenIds(ids, [[7 + i for i in range(k)] for _ in ids]))


def build_kv_config(spec: dict, torch: object) -> object:
    """The KVCacheConfig for the scenario: one full-attention group of ``num_blocks`` blocks."""
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    bs = spec["block_size"]
    return KVCacheConfig(
        num_blocks=spec["num_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(
                ["layer0"],
                FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=16, dtype=torch.float16),
            )
        ],
    )


def build_scheduler(spec: dict) -> object:
    """vLLM's v1 Scheduler configured as the scenario says (no device, no tokenizer)."""
    import torch
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    bs = spec["block_size"]
    max_len = spec["max_model_len"]
    model_config = ModelConfig(
        model=tiny_model_dir(max_len),
        skip_tokenizer_init=True,
        max_model_len=max_len,
        dtype="float16",
        seed=0,
    )
    sched_config = SchedulerConfig(
        max_num_seqs=spec["max_num_seqs"],
        max_num_batched_tokens=spec["max_num_batched_tokens"],
        max_model_len=max_len,
        enable_chunked_prefill=spec.get("enable_chunked_prefill", True),
        is_encoder_decoder=False,
        policy=spec.get("policy", "fcfs"),
        long_prefill_token_threshold=spec.get("long_prefill_token_threshold", 0),
    )
    cache_config = CacheConfig(
        block_size=bs,
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=spec["enable_prefix_caching"],
    )
    vllm_config = VllmConfig(
        model_config=model_config, cache_config=cache_config, scheduler_config=sched_config
    )
    vllm_config.speculative_config = spec_config(spec)
    kv_config = build_kv_config(spec, torch)
    cache_config.num_gpu_blocks = spec["num_blocks"]
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_config,
        structured_output_manager=StructuredOutputManager(vllm_config),
        block_size=bs,
        log_stats=False,
    )


def run_scenario(spec: dict) -> None:
    """Drive one scenario to the end, printing a row per step."""
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    name = spec.get("name", "")
    sched = build_scheduler(spec)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(spec["block_size"], sha256, sched.num_hash_lookahead_tokens)
    pending = sorted(spec["requests"], key=lambda r: r["arrival_step"])
    nxt = 0
    step = 0
    while nxt < len(pending) or sched.has_requests():
        while nxt < len(pending) and pending[nxt]["arrival_step"] <= step:
            r = pending[nxt]
            sp = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True)
            # arrival_time as a live server stamps it: unique and in the order requests came
            sched.add_request(
                Request(
                    r["id"],
                    r["tokens"],
                    sp,
                    None,
                    arrival_time=float(nxt),
                    block_hasher=hasher,
                    priority=r.get("priority", 0),
                )
            )
            nxt += 1
        before = {r.request_id for r in sched.running}
        out = sched.schedule()
        admitted = {
            rid: sched.requests[rid].num_computed_tokens - n
            for rid, n in out.num_scheduled_tokens.items()
            if rid not in before
        }
        sampled: dict[str, list[int]] = {}
        for rid in out.num_scheduled_tokens:
            req = sched.requests[rid]
            # computed tokens were advanced at schedule time; a token is sampled once caught up
            caught_up = req.num_computed_tokens >= req.num_tokens
            sampled[rid] = [sampled_token(rid, req.num_output_tokens)] if caught_up else []
        feed_spec(sched, out, sampled, spec, step)
        ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[sampled[r] for r in ids],
        )
        outputs = sched.update_from_output(out, mro)
        propose_drafts(sched, out, spec)
        finished = []
        for eco in outputs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    finished.append(o.request_id)
        pool = sched.kv_cache_manager.block_pool
        row = {
            "scenario": name,
            "step": step,
            "scheduled": dict(out.num_scheduled_tokens),
            "used_blocks": pool.num_gpu_blocks - 1 - pool.get_num_free_blocks(),
            "preempted": sorted(out.preempted_req_ids or []),
            "finished": finished,
            "admitted": admitted,
            "running": len(sched.running),
            "waiting": len(sched.waiting),
        }
        if spec.get("speculative"):
            row["drafts"] = {r: len(t) for r, t in out.scheduled_spec_decode_tokens.items()}
        print(json.dumps(row), flush=True)
        step += 1
        if step > spec.get("max_steps", 1_000_000):
            break
    print(json.dumps({"scenario": name, "end": True}), flush=True)


def main() -> None:
    data = json.load(sys.stdin)
    for spec in data.get("scenarios", [data]):
        run_scenario(spec)


if __name__ == "__main__":
    main()
