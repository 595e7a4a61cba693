"""Run in the vLLM 0.33.0 oracle venv: vLLM's Scheduler with ``pp`` batches in flight.

What ``vllm/v1/engine/core.py::EngineCore.step_with_batch_queue`` does under pipeline
parallelism (``VllmConfig.max_concurrent_batches`` = PP size on the V1 model runner): it
schedules a new batch while fewer than ``pp`` are in flight and only then waits for the
oldest one's output. Input (stdin, JSON): the driver's scenario (``benchmarks/
vllm_oracle_driver.py``) plus ``pp``; argv[1] is the benchmarks folder. Output: one JSON
list, the scheduled tokens per request of every batch, in order.
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
sys.path.insert(0, sys.argv[1])


def main() -> None:
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm_oracle_driver import build_scheduler, sampled_token

    spec = json.load(sys.stdin)
    sched = build_scheduler(spec)
    init_none_hash(sha256)
    hasher = get_request_block_hasher(spec["block_size"], sha256)
    for i, r in enumerate(spec["requests"]):
        sp = SamplingParams(max_tokens=r["max_tokens"], ignore_eos=True)
        sched.add_request(
            Request(r["id"], r["tokens"], sp, None, arrival_time=float(i), block_hasher=hasher)
        )
    queue: deque[tuple[Any, dict[str, list[int]]]] = deque()
    batches = []
    while sched.has_requests() or queue:
        while len(queue) < spec["pp"] and sched.has_requests():
            out = sched.schedule()
            sampled = {}
            for rid in out.num_scheduled_tokens:
                req = sched.requests[rid]
                done = req.num_computed_tokens >= req.num_tokens
                sampled[rid] = [sampled_token(rid, req.num_output_tokens)] if done else []
            queue.append((out, sampled))
            batches.append(dict(out.num_scheduled_tokens))
        out, sampled = queue.popleft()
        ids = list(out.num_scheduled_tokens)
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=[sampled[r] for r in ids],
        )
        sched.update_from_output(out, mro)
    print(json.dumps(batches))


if __name__ == "__main__":
    main()
