"""API failures as the real API server words them: a v1 `Status` with code, reason,
message and details (k8s.io/apimachinery/pkg/api/errors and util/validation/field)."""

from __future__ import annotations

from typing import Any

from reconcile.kube.validation import FieldError, aggregate
from reconcile.sandbox.resources import Resource


class ApiStatus(Exception):
    """An API failure; the handler turns it into a v1 Status response."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:  # upstream's internal failures carry none
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(resource: Resource, name: str, *, kind: str | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = kind or resource.plural
    return details


def not_found(resource: Resource, name: str) -> ApiStatus:
    return ApiStatus(
        404, "NotFound", f'{resource.qualified} "{name}" not found', _details(resource, name)
    )


def already_exists(resource: Resource, name: str) -> ApiStatus:
    return ApiStatus(
        409,
        "AlreadyExists",
        f'{resource.qualified} "{name}" already exists',
        _details(resource, name),
    )


def conflict(resource: Resource, name: str) -> ApiStatus:
    return ApiStatus(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
        _details(resource, name),
    )


def unconditional_update_refused(resource: Resource, name: str) -> ApiStatus:
    """PUT without metadata.resourceVersion of a kind whose strategy forbids it (Lease):
    upstream names the resource, not the kind, in this one."""
    message = "Invalid value: 0: must be specified for an update"
    details = _details(resource, name)
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": message, "field": "metadata.resourceVersion"}
    ]
    return ApiStatus(
        422,
        "Invalid",
        f'{resource.qualified} "{name}" is invalid: metadata.resourceVersion: {message}',
        details,
    )


def invalid_object(resource: Resource, name: str, errors: list[FieldError]) -> ApiStatus:
    details = _details(resource, name, kind=resource.kind)
    kind = resource.qualified_kind
    if resource.validated_as_core:
        # Upstream validates the internal (core) object: the error names no group.
        details.pop("group", None)
        kind = resource.kind
    details["causes"] = [e.cause() for e in errors]
    return ApiStatus(422, "Invalid", f'{kind} "{name}" is invalid: {aggregate(errors)}', details)


def list_options_invalid(errors: list[FieldError]) -> ApiStatus:
    """Query parameters of a list or watch that ListOptions validation refuses."""
    return ApiStatus(
        422,
        "Invalid",
        f'ListOptions.meta.k8s.io "" is invalid: {aggregate(errors)}',
        {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [e.cause() for e in errors]},
    )


def bad_request(message: str) -> ApiStatus:
    return ApiStatus(400, "BadRequest", message)


def method_not_allowed(message: str) -> ApiStatus:
    return ApiStatus(405, "MethodNotAllowed", message, {})


def unsupported_media_type(content_type: str) -> ApiStatus:
    return ApiStatus(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json (got {content_type!r})",
        {},
    )


# What a POST or PUT body may be: the API server also takes application/yaml.
BODY_MEDIA_TYPES = ("application/json", "application/vnd.kubernetes.protobuf")


def unsupported_body(detail: str = "") -> ApiStatus:
    """A POST or PUT body in a media type the sandbox does not read (no details, as upstream);
    `detail` says what, when the media type is one it reads for other objects."""
    accepted = BODY_MEDIA_TYPES if not detail else BODY_MEDIA_TYPES[:1]
    message = f"the body of the request was in an unknown format - accepted media types include: {', '.join(accepted)}"
    return ApiStatus(415, "UnsupportedMediaType", f"{message} ({detail})" if detail else message)


def not_acceptable() -> ApiStatus:
    """An Accept header that allows no JSON: the sandbox answers in JSON only."""
    return ApiStatus(
        406,
        "NotAcceptable",
        "406: Not Acceptable\n\nAvailable representations: application/json",
        {},
    )


def unauthorized() -> ApiStatus:
    return ApiStatus(401, "Unauthorized", "Unauthorized")


def not_implemented_path(path: str) -> ApiStatus:
    return ApiStatus(
        404,
        "NotFound",
        f"the server could not find the requested resource ({path} is not served by the reconcile sandbox)",
        {},
    )
