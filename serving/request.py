"""A request as the scheduler sees it: known tokens, progress, and the timestamps the metrics need."""

from __future__ import annotations

import enum
from collections.abc import Sequence


class RequestState(enum.Enum):
    WAITING = "waiting"      # not admitted, or preempted and queued again
    RUNNING = "running"      # holds KV blocks; gets prefill chunks or a decode each step
    FINISHED = "finished"


class Request:
    """One generation request.

    `token_ids` holds every known token: the prompt, then each generated token as it is
    sampled. `num_computed` counts the leading tokens whose keys/values are in the KV cache.
    A step processes tokens [num_computed, num_computed + n); when that reaches the end of
    `token_ids` the step samples the next token. So a decode is the case of one uncomputed
    token, and a request preempted by recomputation (num_computed reset to 0) resumes by
    prefilling its prompt *and* the tokens it already generated, which it keeps.

    In simulation the prompt ids are placeholders (zeros) and so are the generated tokens.
    """

    __slots__ = ("request_id", "arrival_s", "token_ids", "num_prompt_tokens", "max_output_tokens",
                 "eos_token_id", "num_computed", "state", "first_token_s", "finish_s", "num_preemptions",
                 "admitted_s")

    def __init__(self, request_id: int, prompt: Sequence[int] | int, max_output_tokens: int,
                 arrival_s: float = 0.0, eos_token_id: int | None = None):
        if isinstance(prompt, int):
            prompt = [0] * prompt
        if len(prompt) < 1:
            raise ValueError(f"request {request_id}: the prompt must have at least one token")
        if max_output_tokens < 1:
            raise ValueError(f"request {request_id}: output_tokens must be >= 1, got {max_output_tokens}")
        self.request_id = request_id
        self.arrival_s = float(arrival_s)
        self.token_ids: list[int] = list(prompt)
        self.num_prompt_tokens = len(prompt)
        self.max_output_tokens = max_output_tokens
        self.eos_token_id = eos_token_id
        self.num_computed = 0
        self.state = RequestState.WAITING
        self.first_token_s: float | None = None
        self.admitted_s: float | None = None
        self.finish_s: float | None = None
        self.num_preemptions = 0

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def max_total_tokens(self) -> int:
        """Tokens the KV cache must hold at most: the last generated token is never fed back."""
        return self.num_prompt_tokens + self.max_output_tokens - 1

    @property
    def in_prefill(self) -> bool:
        """More than one uncomputed token: the (re)computation of a prompt is under way."""
        return self.num_tokens - self.num_computed > 1

    def append_token(self, token: int, now_s: float) -> None:
        self.token_ids.append(token)
        if self.first_token_s is None:
            self.first_token_s = now_s

    def is_done(self) -> bool:
        out = self.num_output_tokens
        return out >= self.max_output_tokens or (
            out > 0 and self.eos_token_id is not None and self.token_ids[-1] == self.eos_token_id)

    def __repr__(self) -> str:
        return (f"Request({self.request_id}, prompt={self.num_prompt_tokens}, out={self.num_output_tokens}/"
                f"{self.max_output_tokens}, computed={self.num_computed}, {self.state.value})")
