"""The data plane's routes (served by gateway.http.DataPlane, not by Django's URL resolver).
Any other /v1 path answers 404 in the OpenAI error shape, any other /v1beta path in Google's."""

from __future__ import annotations

from gateway.http import DataPlane, Handler
from gateway.surfaces import anthropic as anthropic_surface
from gateway.surfaces import chat as chat_surface
from gateway.surfaces import completions as completions_surface
from gateway.surfaces import gemini as gemini_surface
from gateway.surfaces import models as models_surface
from gateway.surfaces import responses as responses_surface
from gateway.surfaces.common import not_found, plain_error

ROUTES: dict[str, Handler] = {
    "/v1/models": models_surface.list_models,
    "/v1/chat/completions": chat_surface.chat_completions,
    "/v1/responses": responses_surface.create_response,
    "/v1/responses/*": responses_surface.response_by_id,
    "/v1/messages": anthropic_surface.messages,
    "/v1/messages/count_tokens": anthropic_surface.count_tokens,
    "/v1/completions": completions_surface.completions,
    "/v1beta/models": gemini_surface.list_models,
    "/v1beta/models/*": gemini_surface.model_action,
    "/v1beta/*": gemini_surface.unknown,
}

data_plane = DataPlane(ROUTES, fallback=not_found, error_response=plain_error)
