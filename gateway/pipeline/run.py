"""The request pipeline's runner: every stage between a surface's parse and the fallback loop, in
one ordered list, for every surface.

It protects the order of spec pipeline.md §1, which is observable (which error wins, what the
estimate counts): normalisation, enforced system prompts, inline image downscale, the token
estimate, the strategy's order of an `auto:fast|reliable|balanced` chain, the capability gates
(which also narrow the chain), the token-budget guardrail, then the sticky session (its model
first, but only among the capable ones: it comes last so that no strategy moves a conversation
off its model). A stage takes the Job and returns it changed, or raises a GatewayError the surface
renders in its own shape.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from gateway.pipeline import budget, capabilities, estimate, images, normalize, sticky, system_prompts
from gateway.routing import strategies
from gateway.routing.router import Chain
from gateway.routing.state import shared_store
from gateway.snapshot import KeyGrant, Snapshot
from gateway.wire.canonical import CanonicalRequest

IMAGE_CONFIG = images.ImageConfig.from_env(os.environ)


@dataclass(frozen=True, slots=True)
class Job:
    """One request on its way to the loop: what it asks, where it may go, and its estimate."""

    request: CanonicalRequest
    chain: Chain
    snapshot: Snapshot
    grant: KeyGrant
    input_tokens: int = 0  # routing estimate of the input, set by the estimate stage
    session_id: str | None = None  # the client's session header, on surfaces that have one
    session: sticky.Session | None = None  # set by the sticky stage when the request has one

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + estimate.output_reserve(self.request)


Stage = Callable[[Job], Awaitable[Job]]


async def normalized(job: Job) -> Job:
    request = normalize.normalized(job.request)
    return job if request is job.request else replace(job, request=request)


async def enforced_prompts(job: Job) -> Job:
    profile_prompt = job.chain.profile.system_prompt if job.chain.profile is not None else ""
    request = system_prompts.with_system_prompts(
        job.request, profile_prompt=profile_prompt, key_prompt=job.grant.system_prompt
    )
    return job if request is job.request else replace(job, request=request)


async def downscaled_images(job: Job) -> Job:
    request = await images.downscale_images(job.request, IMAGE_CONFIG)
    return job if request is job.request else replace(job, request=request)


async def estimated(job: Job) -> Job:
    return replace(job, input_tokens=estimate.input_tokens(job.request))


async def strategy_ordered(job: Job) -> Job:
    chain = await strategies.ordered(job.chain, shared_store(), now=time.time())
    return job if chain is job.chain else replace(job, chain=chain)


async def capable(job: Job) -> Job:
    chain = capabilities.capable_chain(job.chain, job.request, estimate=job.total_tokens)
    return job if chain is job.chain else replace(job, chain=chain)


async def budgeted(job: Job) -> Job:
    limit = job.snapshot.settings["request_max_tokens_budget"]
    request = budget.within_budget(job.request, budget=limit, input_tokens=job.input_tokens)
    return job if request is job.request else replace(job, request=request)


async def sticky_session(job: Job) -> Job:
    session = await sticky.session_for(
        job.request,
        job.chain,
        session_id=job.session_id,
        ttl_s=job.snapshot.settings["sticky_session_ttl_s"],
        store=shared_store(),
        now=time.time(),
    )
    if session is None:
        return job
    padding = sticky.HANDOFF_TOKENS if session.handoff_from else 0  # the note a switch would add
    chain = sticky.preferred_first(job.chain, session.preferred)
    return replace(job, session=session, chain=chain, input_tokens=job.input_tokens + padding)


STAGES: tuple[Stage, ...] = (
    normalized,
    enforced_prompts,
    downscaled_images,
    estimated,
    strategy_ordered,
    capable,
    budgeted,
    sticky_session,
)


async def prepare(job: Job) -> Job:
    for stage in STAGES:
        job = await stage(job)
    return job
