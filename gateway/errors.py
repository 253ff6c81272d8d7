"""The gateway's one exception tree. Each class knows its HTTP status and error type; each
surface renders it in its own wire shape (surfaces/common.py holds the OpenAI rendering).

    GatewayError                      500 server_error
    ├── AuthenticationFailed          401 authentication_error   "Invalid API key"
    ├── InvalidRequest                400 invalid_request_error
    ├── Forbidden                     403 permission_error
    ├── NotFound                      404 invalid_request_error  (code: unknown_url, model_not_found)
    ├── MethodNotAllowed              405 invalid_request_error
    ├── TurnFailed                    the status and type the fallback loop decided (exhaustion,
    │                                 a fatal upstream error, a gateway-key limit)
    └── UpstreamFailure               502 provider_error  (one failed upstream attempt; the fallback
                                                           loop classifies it and decides what next)

Lower-layer errors are translated to the most specific class with `raise ... from exc`.
"""

from __future__ import annotations


class GatewayError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.headers = headers or {}
        self.extra = extra or {}


class AuthenticationFailed(GatewayError):
    status = 401
    type = "authentication_error"

    def __init__(self) -> None:
        super().__init__("Invalid API key")


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class Forbidden(GatewayError):
    status = 403
    type = "permission_error"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"


class MethodNotAllowed(GatewayError):
    status = 405
    type = "invalid_request_error"


class TurnFailed(GatewayError):
    """A request the gateway could not serve, with the status and error type the loop chose."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        type: str,
        code: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(message, code=code, headers=headers, extra=extra)
        self.status = status
        self.type = type


class UpstreamFailure(GatewayError):
    """One upstream attempt failed: an HTTP error status, an in-band error frame, a transport
    failure, a timeout, or an unusable answer (empty, truncated). Providers raise it; only the
    classifier (gateway/routing/classify.py) interprets it.

    `status` is the upstream HTTP status when there was one; `transport` marks connection-level
    failures (reset, refused, DNS); `retry_after_s` is the back-off the upstream stated;
    `skip_bench` exempts the failure from cooldowns (e.g. a truncated reasoning answer);
    `skip_model` rules the model out for the rest of the request without a cooldown;
    `stated_limits` are the (axis, value) limits the upstream's rate-limit headers stated, axis one
    of `rpm`, `rpd`, `tpm`, `tpd` (gateway/providers/ratelimits.py reads them).
    """

    status = 502
    type = "provider_error"

    def __init__(
        self,
        message: str,
        *,
        upstream_status: int | None = None,
        code: str | None = None,
        transport: bool = False,
        timeout: bool = False,
        retry_after_s: float | None = None,
        skip_bench: bool = False,
        skip_model: bool = False,
        stated_limits: tuple[tuple[str, int], ...] = (),
    ) -> None:
        super().__init__(message, code=code)
        self.upstream_status = upstream_status
        self.transport = transport
        self.timeout = timeout
        self.retry_after_s = retry_after_s
        self.skip_bench = skip_bench
        self.skip_model = skip_model
        self.stated_limits = stated_limits
