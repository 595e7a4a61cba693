"""--engine llama.cpp: llama-server's slots, n_batch batches and per-slot KV, as invariants.

Facts from llama.cpp as vendored in llama-cpp-python 0.3.36 (tools/server/server-context.cpp,
update_slots): at most -np requests run; one iteration holds at most -b tokens, decodes first;
each slot owns -c / -np KV tokens and a prompt that does not fit is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvscope.errors import KvscopeError
from kvscope.sim import SimConfig, simulate
from kvscope.workload import Workload, build_workload

CFG = SimConfig(
    engine="llama.cpp",
    max_num_seqs=3,
    ctx_size=3 * 1024,
    max_num_batched_tokens=256,
    enable_prefix_caching=False,
    mode="step",
    sample_interval_s=0.0,
)


def test_slots_batch_cap_and_no_preemption() -> None:
    w = build_workload(
        arrival="poisson:rate=50",
        num_requests=120,
        prompt_len="uniform:min=50,max=700",
        output_len="uniform:min=5,max=200",
        seed=3,
    )
    r = simulate(w, CFG)
    steps = r.steps.to_pandas()
    assert steps.running.max() == 3  # -np 3: busy, and never more than the slots
    assert steps.batch_tokens.max() <= 256  # -b 256
    assert (steps.prefill_tokens > 0).sum() > (steps.batch_tokens == 256).sum() > 0  # chunked
    assert r.figures["preemptions"] == 0  # a slot owns its KV range
    assert r.pool_info["max_model_len"] == 1024
    done = r.requests.to_pandas()
    assert (done.status == "ok").all()
    # decodes are never held back by a prompt: a running request decodes in every step
    # until it finishes, so its TPOT spans exactly its decode steps
    assert np.isfinite(done.tpot_s).all()


def test_a_prompt_longer_than_a_slot_is_refused() -> None:
    w = Workload.build([0.0, 0.1], [1024, 100], [10, 10])
    r = simulate(w, CFG)
    status = dict(
        zip(
            r.requests.column("request_id").to_pylist(),
            r.requests.column("status").to_pylist(),
            strict=True,
        )
    )
    assert list(status.values()) == ["rejected", "ok"]


def test_flags_that_do_not_apply_are_refused() -> None:
    w = Workload.build([0.0], [10], [10])
    with pytest.raises(KvscopeError, match="ctx-size"):
        simulate(w, SimConfig(ctx_size=4096))
    with pytest.raises(KvscopeError, match="first come first served"):
        simulate(w, SimConfig(engine="llama.cpp", scheduling_policy="priority"))
    with pytest.raises(KvscopeError, match="tokens per slot"):
        simulate(w, SimConfig(engine="llama.cpp", ctx_size=4, max_num_seqs=4))
