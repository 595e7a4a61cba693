"""Sessions: growing multi-turn context and exact chained block hashes."""

from __future__ import annotations

import itertools

import numpy as np

from kvscope.workload.lengths import Fixed, Uniform
from kvscope.workload.sessions import SessionSpec, chain_hash, generate_sessions


def test_context_grows_by_previous_turn_and_hashes_extend_the_prefix() -> None:
    spec = SessionSpec(
        turns=Fixed(4), think_time_s=5.0, system_prompt_tokens=100, system_prompts=2, block_size=16
    )
    w = generate_sessions(spec, np.array([0.0, 0.5, 1.0]), Uniform(10, 60), Uniform(5, 40), 7)
    assert len(w) == 12 and w.hash_block_size == 16
    by_sess: dict[str, list[int]] = {}
    for i in range(len(w)):
        by_sess.setdefault(str(w.session_ids[i]), []).append(i)  # type: ignore[index]
    for rows in by_sess.values():
        rows.sort(key=lambda i: int(w.turns[i]))  # type: ignore[index]
        for a, b in itertools.pairwise(rows):
            # next prompt = previous prompt + its answer + a new user message (>= 10 tokens)
            assert w.prompt_tokens[b] >= w.prompt_tokens[a] + w.output_tokens[a] + 10
            assert w.arrival_s[b] >= w.arrival_s[a]
            ha, hb = w.hashes_of(a), w.hashes_of(b)
            assert np.array_equal(hb[: len(ha)], ha)  # earlier full blocks are reused exactly
        for i in rows:
            assert len(w.hashes_of(i)) == w.prompt_tokens[i] // 16  # full blocks only


def test_shared_system_prompt_blocks_match_across_sessions_only_when_same_prompt() -> None:
    spec = SessionSpec(turns=Fixed(1), system_prompt_tokens=64, system_prompts=1, block_size=16)
    w = generate_sessions(spec, np.arange(5.0), Fixed(20), Fixed(5), 1)
    firsts = {tuple(w.hashes_of(i)[:4].tolist()) for i in range(len(w))}
    assert len(firsts) == 1  # 64 system tokens = 4 shared blocks
    fifth = {int(w.hashes_of(i)[4]) for i in range(len(w))}
    assert len(fifth) == 5  # the block after the system prompt is unique per user


def test_chain_hash_depends_on_parent_and_content() -> None:
    a = chain_hash(0, b"x")
    assert a == chain_hash(0, b"x") and a >= 0
    assert a != chain_hash(1, b"x") and a != chain_hash(0, b"y")


def test_max_model_len_ends_sessions_instead_of_overflowing() -> None:
    spec = SessionSpec(turns=Fixed(50), block_size=16)
    w = generate_sessions(spec, np.array([0.0]), Fixed(100), Fixed(100), 0, max_model_len=1000)
    assert (w.prompt_tokens + w.output_tokens).max() <= 1000
    assert w.prompt_tokens.tolist() == [100, 300, 500, 700, 900]  # 900 + 100 fits exactly
    assert w.spec["sessions_ended_at_max_model_len"] == 1
