"""Each chat's incoming-webhook body, built from one ``Message``: pure functions, one per
kind, in ``BUILDERS``.

Formats (as each product documents its incoming webhooks):

* Slack: ``{"text", "blocks"}``; ``text`` is the notification fallback, the blocks are
  what the channel shows. mrkdwn treats ``&``, ``<`` and ``>`` as control characters
  (``<!channel>`` pings everyone), so they are escaped as Slack asks.
* Mattermost: ``{"text", "username"}`` (Markdown); ``@channel``/``@all``/``@here`` in a
  person's text would page the whole channel, so the ``@`` is separated by a zero-width
  joiner.
* Microsoft Teams (Workflows "post to a channel when a webhook request is received"): a
  message with one Adaptive Card attachment. TextBlocks are plain text with light
  Markdown, nothing to escape for mentions (a card cannot ``@`` anyone without an entity).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

USERNAME = "Atlas Console"


@dataclass(frozen=True)
class Message:
    """What a status update says, independent of any chat's format."""

    title: str  # the investigation's title
    deployment: str
    text: str
    author: str
    at: datetime
    link: str  # absolute URL of the investigation page, or "" when unknown

    @property
    def when(self) -> str:
        return self.at.strftime("%Y-%m-%d %H:%M UTC")


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack(message: Message) -> dict[str, Any]:
    title = _slack_escape(message.title)
    heading = f"<{message.link}|{title}>" if message.link else title
    text = _slack_escape(message.text)
    return {
        "text": f"Status update: {title}: {text}",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{heading}*\n{text}"}},
            {
                "type": "context",
                "elements": [
                    {
                        "type": "mrkdwn",
                        "text": _slack_escape(
                            f"{message.deployment} · {message.author} · {message.when}"
                        ),
                    }
                ],
            },
        ],
    }


_MENTION = re.compile(r"@(channel|all|here)\b", re.IGNORECASE)


def _mattermost_quiet(text: str) -> str:
    return _MENTION.sub(lambda m: "@\u200d" + m.group(1), text)


def mattermost(message: Message) -> dict[str, Any]:
    title = _mattermost_quiet(message.title)
    heading = f"[{title}]({message.link})" if message.link else title
    return {
        "username": USERNAME,
        "text": (
            f"#### {heading}\n{_mattermost_quiet(message.text)}\n"
            f"_{message.deployment} · {_mattermost_quiet(message.author)} · {message.when}_"
        ),
    }


def teams(message: Message) -> dict[str, Any]:
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "text": message.title, "weight": "Bolder", "wrap": True},
        {"type": "TextBlock", "text": message.text, "wrap": True},
        {
            "type": "TextBlock",
            "text": f"{message.deployment} · {message.author} · {message.when}",
            "isSubtle": True,
            "spacing": "Small",
            "wrap": True,
        },
    ]
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    }
    if message.link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open", "url": message.link}]
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }


BUILDERS: dict[str, Callable[[Message], dict[str, Any]]] = {
    "slack": slack,
    "mattermost": mattermost,
    "teams": teams,
}


def build(kind: str, message: Message) -> dict[str, Any]:
    """The body for ``kind``; KeyError for a kind with no builder."""
    return BUILDERS[kind](message)
