"""Error pages in the console's own layout, so a 403 still shows where you are; under
``/api/`` the same errors are JSON, because an API client cannot read an HTML page."""

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.template import loader

API_PREFIX = "/api/"


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = str(exception) if exception and str(exception) else "You may not do this."
    if _is_api(request):
        return JsonResponse({"error": reason}, status=403)
    return render(request, "errors/403.html", {"reason": reason}, status=403)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        message = f"no API endpoint at {request.path}"
        if request.path.endswith("/"):
            message += " (API paths have no trailing slash)"
        return JsonResponse({"error": message}, status=404)
    return render(request, "errors/404.html", status=404)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse({"error": "bad request"}, status=400)
    return render(request, "errors/400.html", status=400)


def server_error(request: HttpRequest) -> HttpResponse:
    """No template context here: the failure may be in the context processors themselves."""
    if _is_api(request):
        return JsonResponse({"error": "internal error; the server log has the details"}, status=500)
    return HttpResponse(loader.get_template("500.html").render(), status=500)


class ApiErrorsAsJson:
    """Turns any non-JSON error under ``/api/`` into ``{"error": ...}`` with the same status
    and headers (``Allow`` on a 405, ``WWW-Authenticate`` on a 401): Django's own refusals
    (method not allowed, CSRF) are HTML or empty otherwise."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code < 400
            or not _is_api(request)
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        replacement = JsonResponse(
            {"error": response.reason_phrase.lower()}, status=response.status_code
        )
        for header in ("Allow", "WWW-Authenticate", "Retry-After"):
            if header in response:
                replacement[header] = response[header]
        return replacement
