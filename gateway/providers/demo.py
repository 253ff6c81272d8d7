"""The offline demo provider: a deterministic, streamed answer computed locally.

It exists so a newcomer sees a real stream through the whole gateway with no network and no
keys, and so tests have an upstream that needs no server. It goes through the same adapter
contract as every real provider; the same request always yields the same events.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import aiohttp

from gateway.providers.base import KeyCheck, KeyOutcome, ProviderAdapter, UpstreamTarget, register
from gateway.wire.canonical import Batch, CanonicalRequest, Finish, TextDelta, Usage, estimate_tokens

QUOTE_LIMIT = 200


def demo_reply(request: CanonicalRequest, model_id: str) -> str:
    said = next((m.text() for m in reversed(request.messages) if m.role == "user"), "")
    said = " ".join(said.split())
    if len(said) > QUOTE_LIMIT:
        said = said[: QUOTE_LIMIT - 1] + "…"
    return (
        f"Hello from FreeLLM's offline demo model ({model_id}). "
        f'You said: "{said}". '
        "This answer was streamed through the gateway without any network or keys; "
        "add a real provider in the admin or a config file to get real answers."
    )


@register
class DemoProvider(ProviderAdapter):
    kind = "demo"

    def __init__(self, *, session: aiohttp.ClientSession | None = None, chunk_delay_s: float = 0.02) -> None:
        super().__init__(session=session)
        self.chunk_delay_s = chunk_delay_s

    async def stream(self, request: CanonicalRequest, target: UpstreamTarget) -> AsyncIterator[Batch]:
        reply = demo_reply(request, target.model.public_id)
        budget = request.max_tokens
        emitted = ""
        finish = "stop"
        for piece in re.findall(r"\S+\s*", reply):
            if budget is not None and estimate_tokens(emitted + piece) > budget:
                finish = "length"
                break
            if self.chunk_delay_s and request.stream:
                await asyncio.sleep(self.chunk_delay_s)
            emitted += piece
            yield [TextDelta(piece)]
        prompt = "".join(m.text() for m in request.messages)
        yield [Usage(input_tokens=estimate_tokens(prompt), output_tokens=estimate_tokens(emitted)), Finish(finish)]  # type: ignore[arg-type]

    async def check_key(self, target: UpstreamTarget) -> KeyCheck:
        return KeyCheck(KeyOutcome.VALID, "the demo provider needs no key")
