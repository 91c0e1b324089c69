"""Asking an OpenAI-compatible endpoint with the official ``openai`` client, timed: what ``make serve``, the
serve tier and ``bench/serve.py`` measure (time to first token, tokens/s, usage from the server)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamResult:
    """One streamed chat answer: text, time to first token (and its wall-clock time, for a run's timeline: see
    :mod:`raytpu.core.common.timeline`), usage as the server counted it, total seconds."""

    text: str = ""
    ttft_s: float = 0.0
    first_token_wall: float | None = None
    completion_tokens: int = 0
    prompt_tokens: int = 0
    duration_s: float = 0.0
    finish_reason: str | None = None
    _t0: float = field(default_factory=time.perf_counter, repr=False)

    @property
    def tokens_per_s(self) -> float:
        """Completion tokens over the decode time (after the first token)."""
        decode = self.duration_s - self.ttft_s
        return (self.completion_tokens - 1) / decode if decode > 0 and self.completion_tokens > 1 else 0.0

    def add(self, chunk: Any) -> None:
        """Takes one streamed chunk (content, finish reason, the final usage chunk)."""
        if chunk.usage is not None:
            self.prompt_tokens, self.completion_tokens = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
        for choice in chunk.choices:
            if choice.delta.content:
                if not self.text:
                    self.ttft_s = time.perf_counter() - self._t0
                    self.first_token_wall = time.time()
                self.text += choice.delta.content
            self.finish_reason = choice.finish_reason or self.finish_reason

    def done(self) -> StreamResult:
        self.duration_s = time.perf_counter() - self._t0
        self.ttft_s = self.ttft_s or self.duration_s
        return self


def _request(model: str, prompt: str, max_tokens: int, extra: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "stream": True, "stream_options": {"include_usage": True}, **extra}


def stream_chat(client: Any, model: str, prompt: str, max_tokens: int = 32, **extra: Any) -> StreamResult:
    """One streamed chat completion through an ``openai.OpenAI`` client, timed."""
    result = StreamResult()
    for chunk in client.chat.completions.create(**_request(model, prompt, max_tokens, extra)):
        result.add(chunk)
    return result.done()


async def astream_chat(client: Any, model: str, prompt: str, max_tokens: int = 32, **extra: Any) -> StreamResult:
    """:func:`stream_chat` with an ``openai.AsyncOpenAI`` client."""
    result = StreamResult()
    async for chunk in await client.chat.completions.create(**_request(model, prompt, max_tokens, extra)):
        result.add(chunk)
    return result.done()


DEMO_PROMPTS = ("What is a TPU slice?", "How does Ray reserve a whole slice?", "Write one line about streaming.")


def ask(url: str, model: str, prompts: tuple[str, ...] = DEMO_PROMPTS, max_tokens: int = 32,
        out: Callable[[str], None] = print) -> list[StreamResult]:
    """Lists the models, streams one chat answer per prompt, and prints each with its timing as a table."""
    import openai

    from raytpu.core.common.table import text_table

    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
    out(f"models: {', '.join(m.id for m in client.models.list().data)}")
    results = [stream_chat(client, model, prompt, max_tokens=max_tokens, temperature=1.0, seed=0)
               for prompt in prompts]
    rows = [("PROMPT", "ANSWER", "TTFT ms", "TOKENS", "TOKENS/S", "FINISH")]
    rows += [(p, (r.text[:40] + "...") if len(r.text) > 40 else r.text, f"{r.ttft_s * 1000:.0f}",
              f"{r.completion_tokens} (+{r.prompt_tokens} prompt)", f"{r.tokens_per_s:.1f}", str(r.finish_reason))
             for p, r in zip(prompts, results, strict=True)]
    out("\n".join(text_table(rows)))
    return results
