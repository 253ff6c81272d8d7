"""GET /v1/models in the OpenAI list shape: `auto` and its strategies (`auto:fast`, `auto:reliable`,
`auto:balanced`), `auto:<profile>` for each profile, then every
enabled public model id once (however many providers serve it), with capability flags.

Only what the caller's key may use is listed, so a key limited to some profiles or models sees
exactly what it can ask for. A request carrying `anthropic-version` (the Anthropic SDKs, Claude
Code) gets the same ids in Anthropic's page shape instead (spec/surfaces.md §1.8), with Claude
family slots that auto-route, and Anthropic-shaped errors.
"""

from __future__ import annotations

from typing import Any

from gateway.http import Request, Response, json_response
from gateway.routing.strategies import BALANCED, FAST, RELIABLE, strategy_named
from gateway.snapshot import KeyGrant, ModelInfo, Snapshot
from gateway.surfaces.anthropic import anthropic_error
from gateway.surfaces.common import data_plane_view

OWNER = "freellm"
ANTHROPIC_CREATED_AT = "2026-01-01T00:00:00Z"
# The ids Claude Code offers in its model picker; the Messages surface auto-routes them.
FAMILY_SLOTS = (("claude-opus-4-5", "Opus"), ("claude-sonnet-4-5", "Sonnet"), ("claude-haiku-4-5", "Haiku"))


def _auto_entries(snapshot: Snapshot, grant: KeyGrant) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    default = snapshot.default_profile
    if default is not None and (grant.may_use(default.name) or grant.may_use("auto")):
        entries.append(
            {
                "id": "auto",
                "object": "model",
                "created": 0,
                "owned_by": OWNER,
                "name": f"Auto (the {default.name} profile's fallback chain)",
            }
        )
        for strategy in (FAST, RELIABLE, BALANCED):
            entries.append(
                {
                    "id": f"auto:{strategy}",
                    "object": "model",
                    "created": 0,
                    "owned_by": OWNER,
                    "name": f"Auto ({default.name} profile's chain, {strategy} first)",
                }
            )
    for profile in sorted(snapshot.profiles.values(), key=lambda p: (not p.is_default, p.name.lower())):
        # A profile named like a strategy cannot be reached as auto:<name>; it is not offered.
        if grant.may_use(profile.name) and strategy_named(profile.name) is None:
            entries.append(
                {
                    "id": f"auto:{profile.name}",
                    "object": "model",
                    "created": 0,
                    "owned_by": OWNER,
                    "name": f"Auto ({profile.name} profile)",
                }
            )
    return entries


def _model_entry(public_id: str, members: list[ModelInfo]) -> dict[str, Any]:
    windows = [m.context_window for m in members if m.context_window]
    outputs = [m.max_output_tokens for m in members if m.max_output_tokens]
    return {
        "id": public_id,
        "object": "model",
        "created": min(m.created for m in members),
        "owned_by": OWNER,
        "name": members[0].display_name,
        "context_window": max(windows) if windows else None,
        "max_output_tokens": max(outputs) if outputs else None,
        "vision": any(m.vision for m in members),
        "tools": any(m.tools for m in members),
        "reasoning": any(m.reasoning for m in members),
    }


def model_list(snapshot: Snapshot, grant: KeyGrant) -> dict[str, Any]:
    data = _auto_entries(snapshot, grant)
    for public_id, members in sorted(snapshot.models_by_id().items()):
        if grant.may_use(public_id):
            data.append(_model_entry(public_id, members))
    return {"object": "list", "data": data}


def _may_auto_route(snapshot: Snapshot, grant: KeyGrant) -> bool:
    default = snapshot.default_profile
    return default is not None and (grant.may_use(default.name) or grant.may_use("auto"))


def anthropic_model_list(snapshot: Snapshot, grant: KeyGrant) -> dict[str, Any]:
    def entry(model_id: str, display_name: str) -> dict[str, Any]:
        return {"type": "model", "id": model_id, "display_name": display_name, "created_at": ANTHROPIC_CREATED_AT}

    models = [(public_id, members) for public_id, members in sorted(snapshot.models_by_id().items())]
    models = [(public_id, members) for public_id, members in models if grant.may_use(public_id)]
    data = []
    if _may_auto_route(snapshot, grant):
        data.append(entry("auto", "Auto (router picks the best available model)"))
        if models:
            data += [entry(slot, f"{label} slot (auto-routed to a free model)") for slot, label in FAMILY_SLOTS]
        data += [entry(f"auto:{strategy}", f"Auto ({strategy} first)") for strategy in (FAST, RELIABLE, BALANCED)]
    for profile in sorted(snapshot.profiles.values(), key=lambda p: (not p.is_default, p.name.lower())):
        # A profile named like a strategy cannot be reached as auto:<name>; it is not offered.
        if grant.may_use(profile.name) and strategy_named(profile.name) is None:
            data.append(entry(f"auto:{profile.name}", f"Auto ({profile.name} profile)"))
    data += [entry(public_id, members[0].display_name) for public_id, members in models]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


@data_plane_view(methods=("GET",))
async def _openai_models(request: Request) -> Response:
    return json_response(model_list(request.state["snapshot"], request.state["grant"]))


@data_plane_view(methods=("GET",), render_error=anthropic_error)
async def _anthropic_models(request: Request) -> Response:
    return json_response(anthropic_model_list(request.state["snapshot"], request.state["grant"]))


async def list_models(request: Request) -> Response:
    if "anthropic-version" in request.headers:
        return await _anthropic_models(request)
    return await _openai_models(request)
