"""vLLM 0.33.0's KVCacheManager with events on, published by vLLM's own ZmqEventPublisher.

Runs under the oracle environment (scripts/build_vllm_oracle.sh). Argument: one JSON object
``{"endpoint", "replay_endpoint", "num_blocks", "block_size", "docs", "prefix_blocks",
"suffix_blocks", "seed"}``. Commands on stdin, one per line, each answered by one JSON line
on stdout with the running totals (batches, events, blocks stored/removed, vLLM's own
prefix-cache hits and queries in tokens):
  ``run N``         serve N requests, one published batch per request
  ``rate R S``      serve requests for S seconds at about R events/s
  ``totals``        the totals so far
  ``quit``          shut the publisher down and exit
Request i asks for document d (Zipf-like over ``docs``) as a shared prefix of
``prefix_blocks`` blocks plus ``suffix_blocks`` blocks of its own; prompts are whole blocks,
so vLLM's hit tokens / query tokens equals hit blocks / prompt blocks. Each request is
admitted, allocated and freed in turn (a prefill-only server at batch size 1); the events it
caused (take_events) go out as one KVEventBatch. The request log (id, arrival, prompt
blocks, hit tokens) goes to ``log`` when given, for the replay checks.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("PYTHONHASHSEED", "0")


def build(cfg: dict) -> tuple[object, object]:
    import torch
    from vllm.utils.hashing import sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

    bs = cfg["block_size"]
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=16, dtype=torch.float16)
    kv = KVCacheConfig(
        num_blocks=cfg["num_blocks"],
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["layer0"], spec)],
    )
    mgr = KVCacheManager(
        kv,
        max_model_len=1 << 16,
        scheduler_block_size=bs,
        hash_block_size=bs,
        enable_caching=True,
        log_stats=True,
        enable_kv_cache_events=True,
    )
    init_none_hash(sha256)
    return mgr, get_request_block_hasher(bs, sha256, 0)


def main() -> None:
    cfg = json.loads(sys.argv[1])
    from vllm.distributed.kv_events import KVEventBatch, ZmqEventPublisher
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    mgr, hasher = build(cfg)
    pub = ZmqEventPublisher(
        data_parallel_rank=0,
        endpoint=cfg["endpoint"],
        replay_endpoint=cfg.get("replay_endpoint"),
        topic=cfg.get("topic", ""),
    )
    rng = random.Random(cfg.get("seed", 0))
    bs, docs = cfg["block_size"], cfg["docs"]
    weights = [1.0 / (d + 1) for d in range(docs)]
    tot = {
        "batches": 0,
        "events": 0,
        "blocks_stored": 0,
        "blocks_removed": 0,
        "cleared": 0,
        "hits": 0,
        "queries": 0,
        "requests": 0,
    }
    log = open(cfg["log"], "w") if cfg.get("log") else None  # noqa: SIM115
    sp = SamplingParams(max_tokens=1)
    t0 = time.time()

    def serve_one() -> int:
        i = tot["requests"]
        d = rng.choices(range(docs), weights)[0]
        prefix = [1000 + d * 97 + k for k in range(cfg["prefix_blocks"] * bs)]
        suffix = [50_000 + (i * 131 + k) % 900_000 for k in range(cfg["suffix_blocks"] * bs)]
        tokens = prefix + suffix
        req = Request(f"r{i}", tokens, sp, None, arrival_time=time.time(), block_hasher=hasher)
        blocks, hit, _ = mgr.get_computed_blocks(req)
        got = mgr.allocate_slots(req, len(tokens) - hit, hit, blocks)
        if got is None:
            raise SystemExit("pool too small for one request")
        mgr.record_prefix_cache_stats(req, hit)
        req.num_computed_tokens = len(tokens)
        mgr.free(req)
        stats = mgr.make_prefix_cache_stats()
        tot["hits"] += stats.hits
        tot["queries"] += stats.queries
        events = mgr.take_events()
        for e in events:
            name = type(e).__name__
            if name == "BlockStored":
                tot["blocks_stored"] += len(e.block_hashes)
            elif name == "BlockRemoved":
                tot["blocks_removed"] += len(e.block_hashes)
            else:
                tot["cleared"] += 1
        if events:
            pub.publish(KVEventBatch(ts=time.time(), events=events))
            tot["batches"] += 1
            tot["events"] += len(events)
        if log is not None:
            log.write(
                json.dumps(
                    {
                        "id": req.request_id,
                        "t": time.time() - t0,
                        "doc": d,
                        "blocks": len(tokens) // bs,
                        "hit_tokens": hit,
                    }
                )
                + "\n"
            )
        tot["requests"] += 1
        return len(events)

    print(json.dumps({"ready": True, **tot}), flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "run":
            for _ in range(int(cmd[1])):
                serve_one()
        elif cmd[0] == "rate":
            rate, secs = float(cmd[1]), float(cmd[2])
            start = time.monotonic()
            sent = 0
            while (now := time.monotonic()) - start < secs:
                if sent < rate * (now - start):
                    sent += serve_one()
                else:
                    time.sleep(0.0005)
            tot["seconds"] = time.monotonic() - start
        elif cmd[0] == "quit":
            break
        if log is not None:
            log.flush()
        # give the publisher thread time to drain its queue before reporting
        deadline = time.time() + 10
        while not pub._event_queue.empty() and time.time() < deadline:
            time.sleep(0.01)
        print(json.dumps(tot), flush=True)
    pub.shutdown()


if __name__ == "__main__":
    main()
