"""Sequence-classification checkpoints (reward models): the score head replaces the LM head.

Pinned by a public SGLang start (docs site notebook, 2025-01-28): Skywork/Skywork-Reward-Llama-
3.1-8B-v0.2, ``type=LlamaForSequenceClassification``, loaded 14.11 GB (78.81 -> 64.70 GB free)
against 15.09 GB for Meta-Llama-3.1-8B-Instruct in the same build: the 128,256 x 4,096 LM head
(0.98 GiB) is gone and a one-row score head stands in its place.
"""

from __future__ import annotations

import json

from kvscope.specs.config_parse import parse_config
from kvscope.specs.families import classifier_labels
from kvscope.specs.registry import PRESET_DIR

LLAMA_8B = PRESET_DIR / "meta-llama--Llama-3.1-8B.json"


def _llama_8b(**changes: object) -> dict[str, object]:
    raw = json.loads(LLAMA_8B.read_text())
    raw.pop("_kvscope", None)
    raw.update(changes)
    return raw


def test_reward_model_has_a_score_head_instead_of_the_lm_head() -> None:
    causal = parse_config(_llama_8b())
    reward = parse_config(
        _llama_8b(architectures=["LlamaForSequenceClassification"], id2label={"0": "LABEL_0"})
    )
    assert causal.params["lm_head"] == 128256 * 4096
    assert reward.params["lm_head"] == 4096  # one label
    # the bf16 drop the log shows: 15.09 - 14.11 GB = 0.98 (GiB, SGLang's "GB")
    drop_gib = (causal.total_params - reward.total_params) * 2 / 2**30
    assert abs(drop_gib - 0.98) < 0.01


def test_label_count_follows_transformers() -> None:
    seq_cls = ["Qwen2ForSequenceClassification"]
    assert classifier_labels({"architectures": seq_cls, "num_labels": 3}) == 3
    assert classifier_labels({"architectures": seq_cls, "id2label": {"0": "a", "1": "b"}}) == 2
    assert classifier_labels({"architectures": seq_cls}) == 2  # PretrainedConfig default
    assert classifier_labels({"architectures": ["LlamaForCausalLM"], "num_labels": 3}) == 0
    assert classifier_labels({}) == 0
