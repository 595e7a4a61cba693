"""One request of a workload: when it arrives and how many tokens it carries.

``Request`` is the row type every load consumer sees (the simulator and the load generator), so
a simulated run and a measured run of one workload can be compared request by request. Times
are seconds from the workload's start; lengths are tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscope.errors import KvscopeError


@dataclass(frozen=True, slots=True)
class Request:
    """One request: arrival time (s), prompt and output lengths (tokens), optional prefix data.

    ``prefix_hashes`` are the chained hashes of the prompt's *full* blocks of
    ``hash_block_size`` tokens, first block first; two requests can share the KV of their first
    ``k`` blocks exactly when their first ``k`` hashes are equal (the way vLLM's automatic
    prefix caching keys blocks). ``session_id``/``turn`` place the request in a multi-turn
    conversation; ``prompt_text`` is kept only for text traces.
    """

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    prefix_hashes: tuple[int, ...] = ()
    hash_block_size: int | None = None
    session_id: str | None = None
    turn: int | None = None
    prompt_text: str | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 0:
            raise KvscopeError(
                f"request {self.request_id}: prompt_tokens must be >= 1 and output_tokens >= 0 "
                f"(got {self.prompt_tokens}, {self.output_tokens})."
            )
        if self.arrival_s < 0:
            raise KvscopeError(f"request {self.request_id}: arrival_s must be >= 0.")
        if self.prefix_hashes and not self.hash_block_size:
            raise KvscopeError(
                f"request {self.request_id}: prefix_hashes given without hash_block_size."
            )

    @property
    def total_tokens(self) -> int:
        """Prompt plus output tokens: the context the request reaches when it finishes."""
        return self.prompt_tokens + self.output_tokens
