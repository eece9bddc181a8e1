"""Error pages in the console's own layout, so a 403 still shows where you are."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    reason = str(exception) if exception and str(exception) else "You may not do this."
    return render(request, "errors/403.html", {"reason": reason}, status=403)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "errors/404.html", status=404)
