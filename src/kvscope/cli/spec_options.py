"""The speculative-decoding flags ``plan``, ``simulate`` and ``tune`` share: one spelling each.

``--speculative-config`` is vLLM's JSON (``vllm serve --speculative-config``); the
``--speculative-algorithm`` / ``--speculative-num-steps`` / ``--speculative-eagle-topk`` /
``--speculative-num-draft-tokens`` / ``--speculative-draft-model-path`` set are SGLang's
(``sglang.launch_server``). Both are read by :mod:`kvscope.plan.speculative`, the one parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kvscope.errors import KvscopeError

if TYPE_CHECKING:
    from kvscope.plan.speculative import SpeculativeDecoding
    from kvscope.specs.model import ModelSpec

SpeculativeConfig = Annotated[
    str | None,
    typer.Option(
        "--speculative-config",
        help='vLLM\'s JSON, e.g. \'{"method": "mtp", "num_speculative_tokens": 3}\' '
        "(mtp, eagle, eagle3, dspark, ngram, draft_model; dspark: plan only) [default: off].",
    ),
]
SpeculativeAlgorithm = Annotated[
    str | None,
    typer.Option(
        "--speculative-algorithm",
        help="SGLang's: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM or DSPARK (DeepSeek V4 "
        "checkpoints with DSpark stages, 0.5.16+) [default: off].",
    ),
]
SpeculativeNumSteps = Annotated[
    int | None,
    typer.Option(
        "--speculative-num-steps",
        help="SGLang's draft steps [default: SGLang's choice, 3 for DeepSeek, else 5].",
    ),
]
SpeculativeEagleTopk = Annotated[
    int | None,
    typer.Option(
        "--speculative-eagle-topk",
        help="SGLang's EAGLE branching [default: SGLang's choice, 1 for DeepSeek, else 4].",
    ),
]
SpeculativeNumDraftTokens = Annotated[
    int | None,
    typer.Option(
        "--speculative-num-draft-tokens",
        help="SGLang's tokens verified per request [default: num-steps + 1 at topk 1, else 8; "
        "DSPARK: the checkpoint's dspark_block_size + 1].",
    ),
]
SpeculativeDraftModelPath = Annotated[
    str | None,
    typer.Option(
        "--speculative-draft-model-path",
        help="SGLang's draft checkpoint (EAGLE, EAGLE3, STANDALONE) [default: none].",
    ),
]


def resolve_speculative(
    engine: str,
    config: str | None,
    algorithm: str | None = None,
    num_steps: int | None = None,
    eagle_topk: int | None = None,
    num_draft_tokens: int | None = None,
    draft_model_path: str | None = None,
    model: ModelSpec | None = None,
) -> SpeculativeDecoding | None:
    """The deployment's speculative decoding from either engine's flags, or None."""
    from kvscope.plan.speculative import from_sglang, parse_vllm

    sglang_flags = {
        "--speculative-num-steps": num_steps,
        "--speculative-eagle-topk": eagle_topk,
        "--speculative-num-draft-tokens": num_draft_tokens,
        "--speculative-draft-model-path": draft_model_path,
    }
    given = [k for k, v in sglang_flags.items() if v is not None]
    if algorithm is None and given:
        raise KvscopeError(f"{given[0]} needs --speculative-algorithm.")
    if config is not None and algorithm is not None:
        raise KvscopeError(
            "--speculative-config (vLLM's) and --speculative-algorithm (SGLang's) both given.",
            "Use one spelling.",
        )
    if algorithm is not None:
        if engine != "sglang":
            raise KvscopeError(
                "--speculative-algorithm is SGLang's flag; vLLM takes --speculative-config.",
                'E.g. --speculative-config \'{"method": "mtp", "num_speculative_tokens": 3}\'.',
            )
        deepseek = model is not None and model.num_mtp_layers > 0
        gamma = model.dspark_block_size if model is not None else 0
        return from_sglang(
            algorithm, num_steps, eagle_topk, num_draft_tokens, draft_model_path, deepseek, gamma
        )
    return None if config is None else parse_vllm(config)
