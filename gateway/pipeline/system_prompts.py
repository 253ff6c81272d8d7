"""Enforced system prompts: the routing profile's and the gateway key's, put before the client's.

It protects what an operator configured from what a client sends: the prompts are inserted as
system messages ahead of everything the client wrote (the client's own system messages are kept,
after them), so no request through that profile or with that key goes without them. Order: the
profile's (the team's policy for that chain) first, then the key's (this user's or application's),
then the client's. They count toward the token estimate like any other text (the stage runs
before estimation). A model id asked for directly belongs to no profile, so only the key's applies.
"""

from __future__ import annotations

from gateway.wire.canonical import CanonicalRequest, Message


def with_system_prompts(request: CanonicalRequest, *, profile_prompt: str, key_prompt: str) -> CanonicalRequest:
    prompts = [prompt.strip() for prompt in (profile_prompt, key_prompt) if prompt and prompt.strip()]
    if not prompts:
        return request
    injected = [Message(role="system", content=prompt) for prompt in prompts]
    return request.model_copy(update={"messages": [*injected, *request.messages]})
