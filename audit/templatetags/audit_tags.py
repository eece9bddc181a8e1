"""``{% investigation_audit_log investigation %}``: the log partial with its entries, so a
page can include it without its view knowing about the audit app."""

from __future__ import annotations

from django import template

from audit import log

register = template.Library()


@register.inclusion_tag("audit/_investigation_log.html")
def investigation_audit_log(investigation) -> dict:
    return {"investigation": investigation, "audit_entries": log.for_investigation(investigation)}
