"""The one reader of speculative-decoding flags: vLLM's ``--speculative-config`` and SGLang's.

vLLM (``vllm/config/speculative.py::SpeculativeConfig`` at v0.33.0): a JSON object whose
``method`` is ``mtp`` (every ``*_mtp`` model type is normalised to it in ``__post_init__``),
``eagle``, ``eagle3``, ``dspark``, ``ngram`` or ``draft_model``; no method with ``model``
``ngram`` is ``ngram``, with another model ``draft_model``. ``num_speculative_tokens`` (k) is
the number of draft tokens per step; ``draft_tensor_parallel_size`` the drafter's TP (default: the
target's).

SGLang (``python/sglang/srt/server_args.py`` at v0.5.x): ``--speculative-algorithm``
(EAGLE, EAGLE3, NEXTN = EAGLE on the model's own MTP layers, STANDALONE = a draft model,
NGRAM), ``--speculative-num-steps`` (draft steps, k), ``--speculative-eagle-topk`` and
``--speculative-num-draft-tokens`` (tokens verified per request per step). When the steps
are not given SGLang picks them by architecture (``auto_choose_speculative_params``:
3 / 1 / 4 for DeepSeek V2/V3-style models, else 5 / 4 / 8), and topk 1 forces
``num_draft_tokens = num_steps + 1``.

Units: tokens. Pure: no engine imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvscope.errors import KvscopeError

#: Methods with a trained draft head that keeps its own KV layers.
EAGLE_METHODS = ("eagle", "eagle3", "mtp")
#: Methods without a draft network (no drafter weights, no drafter KV).
KVLESS_METHODS = ("ngram", "ngram_gpu", "suffix")
#: DSpark (vLLM 0.25.0+, ``SpeculativeConfig.method == "dspark"``; ``DSparkModelTypes`` in
#: ``vllm/config/speculative.py`` at v0.31.0): stages the target checkpoint ships (DeepSeek
#: V4-Flash-0731, V4.1), drafted with no ``model`` (vLLM then takes the target's).
DSPARK = "dspark"
METHODS = (*EAGLE_METHODS, *KVLESS_METHODS, "draft_model", DSPARK)
#: Methods vLLM 0.33.0 accepts that kvscope does not model (one line says so).
UNMODELLED = ("dflash", "custom_class", "extract_hidden_states")
#: ``SpeculativeMethod`` MTP model types of vLLM 0.33.0, all normalised to ``mtp``.
MTP_ALIASES = frozenset(
    [
        "deepseek_mtp",
        "dots3_note_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "glm4_moe_lite_mtp",
        "glm_ocr_mtp",
        "ernie_mtp",
        "nemotron_h_mtp",
        "exaone_moe_mtp",
        "exaone4_5_mtp",
        "qwen3_next_mtp",
        "qwen4_exp_mtp",
        "qwen3_5_mtp",
        "longcat_flash_mtp",
        "bailing_hybrid_v3_mtp",
        "minimax_m3_mtp",
        "bailing_hybrid_mtp",
        "kimi_k3_mtp",
        "pangu_ultra_moe_mtp",
        "step3p5_mtp",
        "step5_mtp",
        "hy_v3_mtp",
        "hy_v4_mtp",
        "gemma4_mtp",
        "inkling_mtp",
        "glm5_next_mtp",
    ]
)
#: Every field of vLLM 0.33.0's ``SpeculativeConfig`` a user may set (others are refused).
KNOWN_KEYS = frozenset(
    [
        "enforce_eager",
        "num_speculative_tokens",
        "model",
        "method",
        "draft_tensor_parallel_size",
        "tensor_parallel_size",
        "quantization",
        "moe_backend",
        "attention_backend",
        "kv_cache_dtype",
        "max_model_len",
        "revision",
        "code_revision",
        "index_share_for_mtp_iteration",
        "disable_padded_drafter_batch",
        "disable_eagle_block_drop",
        "disable_lookahead_block_hashes",
        "draft_lm_head_quantization",
        "use_local_argmax_reduction",
        "use_heterogeneous_vocab",
        "prompt_lookup_max",
        "prompt_lookup_min",
        "parallel_drafting",
        "num_speculative_tokens_per_batch_size",
        "suffix_decoding_max_tree_depth",
        "suffix_decoding_max_cached_requests",
        "suffix_decoding_max_spec_factor",
        "suffix_decoding_min_token_prob",
        "rejection_sample_method",
        "synthetic_acceptance_rates",
        "synthetic_acceptance_length",
        "enable_adaptive_verification",
        "draft_sample_method",
        "dspark_draft_topk",
        "xpress_topc",
        "fly_window_size",
        "fly_entropy_threshold",
        "fly_entropy_top_k",
    ]
)
#: SGLang ``--speculative-algorithm`` values and the vLLM method each is.
SGLANG_ALGORITHMS = {
    "EAGLE": "eagle",
    "EAGLE3": "eagle3",
    "NEXTN": "mtp",
    "STANDALONE": "draft_model",
    "NGRAM": "ngram",
    "DSPARK": DSPARK,
}
#: SGLang's DSpark gamma when neither flag nor checkpoint gives one (``DEFAULT_DSPARK_GAMMA``,
#: speculative/dspark_components/dspark_config.py of 0.5.16)
SGLANG_DSPARK_GAMMA = 7
#: SGLang ``auto_choose_speculative_params``: (num_steps, eagle_topk, num_draft_tokens).
SGLANG_AUTO_DEEPSEEK = (3, 1, 4)
SGLANG_AUTO_OTHER = (5, 4, 8)
MAX_SPEC_TOKENS = 64


@dataclass(frozen=True)
class SpeculativeDecoding:
    """Speculative decoding of one deployment, in vLLM's terms.

    ``num_speculative_tokens``: draft tokens per request per step (SGLang's num_steps).
    ``verify_tokens``: tokens a request sends through the target per verification pass
    (k + 1 in vLLM; SGLang's ``num_draft_tokens``). ``draft_tensor_parallel_size``: None =
    the target's TP. ``model``: the draft checkpoint (eagle, eagle3, draft_model).
    ``raw``: the parsed vLLM JSON (the simulator reads its acceptance fields).
    """

    method: str
    num_speculative_tokens: int
    verify_tokens: int
    draft_tensor_parallel_size: int | None = None
    model: str | None = None
    eagle_topk: int = 1
    engine: str = "vllm"
    parallel_drafting: bool = False
    raw: tuple[tuple[str, Any], ...] = ()

    @property
    def has_drafter(self) -> bool:
        """A draft network is loaded (weights and KV layers beside the target's)."""
        return self.method not in KVLESS_METHODS

    def raw_dict(self) -> dict[str, Any]:
        return dict(self.raw)


def _positive(value: Any, what: str, high: int = MAX_SPEC_TOKENS) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise KvscopeError(f"{what} must be an integer in [1, {high}], not {value!r}.")
    return value


def parse_vllm(text: str) -> SpeculativeDecoding:
    """``--speculative-config JSON`` checked against vLLM 0.33.0's fields and methods."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise KvscopeError(f"--speculative-config is not JSON: {err.msg}.") from None
    if not isinstance(doc, dict):
        raise KvscopeError("--speculative-config must be a JSON object.")
    unknown = sorted(set(doc) - KNOWN_KEYS)
    if unknown:
        raise KvscopeError(
            f"--speculative-config: unknown key(s) {', '.join(unknown)} "
            "(vLLM 0.33.0 SpeculativeConfig fields only)."
        )
    method = doc.get("method")
    model = doc.get("model")
    if method is None:
        if model is None:
            raise KvscopeError("--speculative-config needs a method (or a model).")
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if not isinstance(method, str):
        raise KvscopeError(f"--speculative-config: method must be a string, not {method!r}.")
    method = "mtp" if method in MTP_ALIASES else ("ngram" if method == "[ngram]" else method)
    if method in UNMODELLED:
        raise KvscopeError(f"--speculative-config: method '{method}' is not modelled by kvscope.")
    if method not in METHODS:
        raise KvscopeError(
            f"--speculative-config: unknown method {method!r}; "
            f"known: {', '.join(sorted({*METHODS, *UNMODELLED}))} or an MTP model type."
        )
    for key in ("disable_lookahead_block_hashes", "num_speculative_tokens_per_batch_size"):
        if doc.get(key):
            raise KvscopeError(f"--speculative-config: {key} is not modelled by kvscope.")
    if method == "draft_model" and not isinstance(model, str):
        raise KvscopeError("--speculative-config: method draft_model needs a model.")
    if model is not None and not isinstance(model, str):
        raise KvscopeError(f"--speculative-config: model must be a string, not {model!r}.")
    if doc.get("num_speculative_tokens") is None:
        raise KvscopeError("--speculative-config: num_speculative_tokens is required.")
    k = _positive(doc["num_speculative_tokens"], "--speculative-config: num_speculative_tokens")
    tp = doc.get("draft_tensor_parallel_size")
    if tp is not None:
        tp = _positive(tp, "--speculative-config: draft_tensor_parallel_size", 1024)
    return SpeculativeDecoding(
        method=method,
        num_speculative_tokens=k,
        verify_tokens=k + 1,
        draft_tensor_parallel_size=tp,
        model=model if method in ("draft_model", "eagle", "eagle3", DSPARK) else None,
        parallel_drafting=bool(doc.get("parallel_drafting", False)),
        raw=tuple(sorted(doc.items(), key=lambda kv: kv[0])),
    )


def from_sglang(
    algorithm: str,
    num_steps: int | None = None,
    eagle_topk: int | None = None,
    num_draft_tokens: int | None = None,
    draft_model: str | None = None,
    deepseek_like: bool = False,
    dspark_block_size: int = 0,
) -> SpeculativeDecoding:
    """SGLang's ``--speculative-*`` flags, with its automatic choice when steps are absent.

    DSPARK (0.5.16+, ``_handle_dspark``): one step of gamma draft tokens, gamma =
    ``num_draft_tokens - 1``, else the checkpoint's ``dspark_block_size``, else 7; no draft
    path means the checkpoint's own stages."""
    method = SGLANG_ALGORITHMS.get(algorithm.upper())
    if method is None:
        raise KvscopeError(
            f"--speculative-algorithm: unknown algorithm {algorithm!r}; "
            f"known: {', '.join(SGLANG_ALGORITHMS)}."
        )
    if method == DSPARK:
        if num_draft_tokens is not None:
            what = "--speculative-num-draft-tokens (gamma + 1) for DSPARK"
            gamma = _positive(num_draft_tokens, what, MAX_SPEC_TOKENS + 1) - 1
            if gamma < 1:
                raise KvscopeError(f"{what} must be at least 2.")
        else:
            gamma = dspark_block_size or SGLANG_DSPARK_GAMMA
        return SpeculativeDecoding(
            method=DSPARK,
            num_speculative_tokens=gamma,
            verify_tokens=gamma + 1,
            model=draft_model,
            engine="sglang",
        )
    if method in ("eagle", "eagle3", "draft_model") and draft_model is None:
        if not (method == "eagle" and deepseek_like):
            raise KvscopeError(
                f"--speculative-algorithm {algorithm.upper()} needs --speculative-draft-model-path."
            )
        method = "mtp"  # EAGLE on a DeepSeek-style checkpoint drafts with its NextN layers
    auto = SGLANG_AUTO_DEEPSEEK if deepseek_like else SGLANG_AUTO_OTHER
    steps = auto[0] if num_steps is None else _positive(num_steps, "--speculative-num-steps")
    topk = auto[1] if eagle_topk is None else _positive(eagle_topk, "--speculative-eagle-topk")
    if num_draft_tokens is None:
        verify = steps + 1 if topk == 1 or num_steps is not None else auto[2]
    else:
        verify = _positive(num_draft_tokens, "--speculative-num-draft-tokens", 4096)
    if topk == 1:
        verify = steps + 1  # server_args: topk 1 forces num_draft_tokens = num_steps + 1
    return SpeculativeDecoding(
        method=method,
        num_speculative_tokens=steps,
        verify_tokens=verify,
        model=draft_model,
        eagle_topk=topk,
        engine="sglang",
    )


def to_vllm_json(spec: SpeculativeDecoding) -> str:
    """The vLLM ``--speculative-config`` that means ``spec`` (for logs and run records)."""
    doc: dict[str, Any] = spec.raw_dict() or {
        "method": spec.method,
        "num_speculative_tokens": spec.num_speculative_tokens,
    }
    if spec.model and "model" not in doc:
        doc["model"] = spec.model
    return json.dumps(doc, sort_keys=True)
