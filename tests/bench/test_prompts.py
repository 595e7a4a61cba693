"""Prompt rendering: exact lengths with a tokenizer, byte-identical shared prefixes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscope.bench.prompts import (
    WORDS,
    Calibration,
    PromptBuilder,
    TokenizerBackend,
    fit_calibration,
)
from kvscope.errors import KvscopeError
from kvscope.workload.request import Request


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE (GPT-2 style) with a BOS post-processor, trained here on our words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<s>"], show_progress=False)
    corpus = [" ".join(WORDS[i:] + WORDS[:i]) for i in range(0, len(WORDS), 7)]
    tok.train_from_iterator(corpus, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(path))
    return path


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 600), idx=st.integers(0, 10_000))
def test_prompts_have_exactly_the_requested_tokens(tokenizer_json: Path, n: int, idx: int) -> None:
    backend = TokenizerBackend(tokenizer_json)
    b = PromptBuilder(tokenizer=backend, seed=3)
    text = b.build(Request("r", 0.0, max(n, 2), 1), idx)
    assert backend.count(text) == max(n, 2)


def test_tokenizer_counts_bos_like_the_server(tokenizer_json: Path) -> None:
    backend = TokenizerBackend(tokenizer_json)
    assert backend.special_overhead() == 1
    assert len(backend.words) > 50


def _req(rid: str, hashes: tuple[int, ...], tokens: int, bs: int = 16) -> Request:
    return Request(rid, 0.0, tokens, 8, prefix_hashes=hashes, hash_block_size=bs)


@settings(max_examples=60, deadline=None)
@given(
    shared=st.lists(st.integers(0, 2**62), min_size=1, max_size=6, unique=True),
    a_tail=st.lists(st.integers(0, 2**62), max_size=3),
    b_tail=st.lists(st.integers(0, 2**62), max_size=3),
    extra=st.integers(0, 15),
)
def test_shared_hashes_give_byte_identical_prefixes(
    shared: list[int], a_tail: list[int], b_tail: list[int], extra: int
) -> None:
    b = PromptBuilder(seed=1)
    ha, hb = (*shared, *a_tail), (*shared, *b_tail)
    pa = b.build(_req("a", ha, 16 * len(ha) + extra), 0)
    pb = b.build(_req("b", hb, 16 * len(hb) + extra), 1)
    # the shared blocks render to the same bytes at the start of both prompts
    shared_text = " ".join(b._block(h, 16) for h in shared)
    assert pa.startswith(shared_text + " ") and pb.startswith(shared_text + " ")
    if a_tail and b_tail and a_tail[0] != b_tail[0]:  # and the first differing block differs
        assert pa[len(shared_text) :].split()[:16] != pb[len(shared_text) :].split()[:16]


def test_different_first_block_means_different_prompts() -> None:
    b = PromptBuilder(seed=1)
    assert b.build(_req("a", (1, 2), 40), 0)[:20] != b.build(_req("b", (3, 2), 40), 0)[:20]


def test_same_seed_same_prompts_other_seed_other_prompts() -> None:
    r = Request("r", 0.0, 300, 8)
    assert PromptBuilder(seed=5).build(r, 9) == PromptBuilder(seed=5).build(r, 9)
    assert PromptBuilder(seed=5).build(r, 9) != PromptBuilder(seed=6).build(r, 9)
    assert PromptBuilder(seed=5).build(r, 9) != PromptBuilder(seed=5).build(r, 10)


def test_calibration_sizes_prompts_by_measured_tokens_per_word() -> None:
    # a server that counts 1.5 tokens per word plus a BOS: 32 words -> 49, 256 -> 385
    cal = fit_calibration([(32, 49), (256, 385)], "measured")
    assert cal.tokens_per_word == pytest.approx(1.5)
    assert cal.overhead_tokens == pytest.approx(1.0)
    words = PromptBuilder(calibration=cal).build(Request("r", 0.0, 301, 4), 0).split()
    assert len(words) == 200  # (301 - 1) / 1.5


def test_calibration_rejects_counts_that_do_not_grow() -> None:
    with pytest.raises(KvscopeError):
        fit_calibration([(32, 50), (256, 50)], "measured")


def test_text_traces_keep_their_own_prompt() -> None:
    r = Request("r", 0.0, 3, 4, prompt_text="What is KV cache?")
    assert PromptBuilder(calibration=Calibration()).build(r, 0) == "What is KV cache?"


def test_missing_tokenizer_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KvscopeError, match=r"no tokenizer\.json"):
        TokenizerBackend(tmp_path / "nope.json")
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{not json")
    with pytest.raises(KvscopeError, match="not a readable"):
        TokenizerBackend(bad)


@settings(max_examples=25, deadline=None)
@given(
    hashes=st.lists(st.integers(0, 2**62), min_size=1, max_size=4, unique=True),
    extra=st.integers(2, 40),
)
def test_exact_length_holds_with_shared_blocks(
    tokenizer_json: Path, hashes: list[int], extra: int
) -> None:
    backend = TokenizerBackend(tokenizer_json)
    b = PromptBuilder(tokenizer=backend, seed=2)
    n = 16 * len(hashes) + extra
    a = b.build(_req("a", tuple(hashes), n), 0)
    c = b.build(_req("c", tuple(hashes), n), 1)
    assert backend.count(a) == n == backend.count(c)
    shared = " ".join(b._block(h, 16) for h in hashes)
    assert shared in a and shared in c and a != c
