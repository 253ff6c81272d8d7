"""GET /v1/models in the OpenAI list shape: `auto`, `auto:<profile>` for each profile, then every
enabled public model id once (however many providers serve it), with capability flags.

Only what the caller's key may use is listed, so a key limited to some profiles or models sees
exactly what it can ask for.
"""

from __future__ import annotations

from typing import Any

from gateway.http import Request, Response, json_response
from gateway.snapshot import KeyGrant, ModelInfo, Snapshot
from gateway.surfaces.common import data_plane_view

OWNER = "freellm"


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
    for profile in sorted(snapshot.profiles.values(), key=lambda p: (not p.is_default, p.name.lower())):
        if grant.may_use(profile.name):
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


@data_plane_view(methods=("GET",))
async def list_models(request: Request) -> Response:
    return json_response(model_list(request.state["snapshot"], request.state["grant"]))
