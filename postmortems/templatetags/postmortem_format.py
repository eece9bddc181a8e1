"""Formatting shared by the postmortem's HTML page, its PDF and its Markdown."""

from __future__ import annotations

from django import template

from postmortems import markdown

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    return markdown.duration(seconds)


@register.filter
def num(value: float | None) -> str:
    return markdown.num(value)


@register.filter
def thousands(value: int | None) -> str:
    return "—" if value is None else f"{value:,}"


@register.filter
def absolute(value: float | None) -> float | None:
    return None if value is None else abs(value)
