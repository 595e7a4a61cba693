"""Record a real vLLM ``/metrics`` page from vLLM's own code, on CPU, without a GPU.

Runs in a separate venv holding vllm==0.33.0 installed with --no-deps and CPU torch
(scripts/build_vllm_oracle.sh builds it), never in the project's venv:

    ORACLE=~/.cache/kvscope/vllm-oracle-0.33.0
    VLLM_TARGET_DEVICE=cpu $ORACLE/bin/python scripts/record_vllm_metrics.py OUT_DIR

vLLM's v1 ``Scheduler`` (real KV-cache manager, prefix caching on, a 96-block pool) is driven
by a seeded request stream; a stand-in model runner samples one token per decoding request
per step. Each step's ``EngineCoreOutputs`` go through vLLM's ``OutputProcessor`` (which
times TTFT and inter-token latency) into ``IterationStats``, and the scheduler's
``SchedulerStats`` and those into vLLM's ``PrometheusStatLogger`` -- the exact path of
``LLMEngine.step``. The default prometheus_client registry is then rendered twice (mid-run
and at the end) to ``vllm_0_33_0_metrics_t1.txt`` / ``_t2.txt``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import prometheus_client
import torch
import vllm
from vllm.engine.arg_utils import EngineArgs
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.engine import EngineCoreRequest
from vllm.v1.engine.output_processor import OutputProcessor
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
)
from vllm.v1.metrics.loggers import PrometheusStatLogger
from vllm.v1.metrics.stats import IterationStats
from vllm.v1.outputs import ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

BLOCK = 16
NUM_BLOCKS = 96
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def main(out_dir: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="kvscope-vllm-"))
    (folder / "config.json").write_text(json.dumps(TINY_LLAMA))
    args = EngineArgs(
        model=str(folder),
        skip_tokenizer_init=True,
        max_model_len=1024,
        block_size=BLOCK,
        max_num_seqs=8,
        max_num_batched_tokens=256,
        enable_prefix_caching=True,
        enforce_eager=True,
        dtype="bfloat16",
        served_model_name=["kvscope/tiny-llama"],
    )
    cfg = args.create_engine_config()
    cfg.cache_config.num_gpu_blocks = NUM_BLOCKS
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(2)]
    spec = FullAttentionSpec(block_size=BLOCK, num_kv_heads=2, head_size=16, dtype=torch.bfloat16)
    kv_cfg = KVCacheConfig(
        num_blocks=NUM_BLOCKS, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(layers, spec)]
    )
    sched = Scheduler(cfg, kv_cfg, StructuredOutputManager(cfg), block_size=BLOCK, log_stats=True)
    hash_fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(BLOCK, hash_fn)
    processor = OutputProcessor(tokenizer=None, log_stats=True)
    logger = PrometheusStatLogger(cfg)
    logger.log_engine_initialized()

    rng = random.Random(7)
    shared_prefix = [rng.randrange(1, 500) for _ in range(64)]
    pending = []
    for i in range(40):
        n = rng.randrange(48, 320)
        body = [rng.randrange(1, 500) for _ in range(n)]
        prompt = shared_prefix + body if i % 2 == 0 else body
        params = SamplingParams(max_tokens=rng.randrange(16, 96), ignore_eos=True)
        pending.append((i * 0.004, f"req-{i}", prompt, params))

    t0 = time.time()
    steps = 0
    dumped = False
    while pending or sched.has_unfinished_requests():
        now = time.time() - t0
        while pending and pending[0][0] <= now:
            _, rid, prompt, params = pending.pop(0)
            ecr = EngineCoreRequest(
                request_id=rid,
                prompt_token_ids=prompt,
                mm_features=None,
                sampling_params=params,
                pooling_params=None,
                arrival_time=time.time(),
                lora_request=None,
                cache_salt=None,
                data_parallel_rank=None,
                external_req_id=rid,
            )
            processor.add_request(ecr, prompt=None)
            sched.add_request(Request.from_engine_core_request(ecr, hasher))
        out = sched.schedule()
        time.sleep(0.002)  # the "forward pass"
        req_ids = list(out.num_scheduled_tokens)
        sampled = []
        for rid in req_ids:
            req = sched.requests[rid]
            done_prefill = req.num_computed_tokens >= req.num_prompt_tokens
            sampled.append([rng.randrange(1, 500)] if done_prefill else [])
        mro = ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
        )
        outputs = sched.update_from_output(out, mro)
        steps += 1
        for eco in outputs.values():
            it = IterationStats() if eco.outputs else None
            processor.process_outputs(
                eco.outputs, engine_core_timestamp=eco.timestamp, iteration_stats=it
            )
            processor.update_scheduler_stats(eco.scheduler_stats)
            if eco.scheduler_stats is not None:
                logger.record(scheduler_stats=eco.scheduler_stats, iteration_stats=it)
        if not dumped and steps == 60:
            _dump(out_dir / "vllm_0_33_0_metrics_t1.txt", steps)
            dumped = True
    _dump(out_dir / "vllm_0_33_0_metrics_t2.txt", steps)
    print(f"vllm {vllm.__version__}: {steps} scheduler steps, pages in {out_dir}")


def _dump(path: Path, steps: int) -> None:
    page = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    head = (
        f"# Recorded by scripts/record_vllm_metrics.py: vllm {vllm.__version__} "
        f"PrometheusStatLogger fed by the v1 Scheduler on CPU after {steps} steps "
        f"({time.strftime('%Y-%m-%d', time.gmtime())}); block_size={BLOCK}, "
        f"num_gpu_blocks={NUM_BLOCKS}.\n"
    )
    path.write_text(head + page)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
