"""Each chat's body, built by a pure function per kind."""

from __future__ import annotations

from datetime import UTC, datetime

from comms.payloads import BUILDERS, Message, build

AT = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
MESSAGE = Message(
    title="High TTFT on atlas-prod",
    deployment="atlas-prod",
    text="KV cache at 94%; lowering max_num_seqs. <!channel> @channel & co",
    author="ana",
    at=AT,
    link="https://atlas.example/investigations/1/",
)


def test_every_chat_kind_has_a_builder():
    assert set(BUILDERS) == {"slack", "mattermost", "teams"}


def test_slack_sends_text_and_blocks_with_mrkdwn_escaped():
    body = build("slack", MESSAGE)
    assert set(body) == {"text", "blocks"}
    section, context = body["blocks"]
    assert section["type"] == "section" and section["text"]["type"] == "mrkdwn"
    assert "&lt;!channel&gt;" in section["text"]["text"]  # no channel-wide ping
    assert "&amp; co" in body["text"]
    assert section["text"]["text"].startswith("*<https://atlas.example/investigations/1/|High")
    assert context["elements"][0]["text"] == "atlas-prod · ana · 2026-12-01 09:30 UTC"


def test_mattermost_sends_markdown_text_and_a_username_without_channel_mentions():
    body = build("mattermost", MESSAGE)
    assert body["username"] == "Atlas Console"
    assert set(body) == {"text", "username"}
    assert "@channel" not in body["text"] and "@\u200dchannel" in body["text"]
    assert "[High TTFT on atlas-prod](https://atlas.example/investigations/1/)" in body["text"]


def test_teams_sends_one_adaptive_card_message():
    body = build("teams", MESSAGE)
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert [block["type"] for block in card["body"]] == ["TextBlock"] * 3
    assert card["body"][1]["text"] == MESSAGE.text
    assert card["actions"][0]["url"] == MESSAGE.link


def test_no_link_when_the_console_address_is_unknown():
    bare = Message(**{**MESSAGE.__dict__, "link": ""})
    assert "|" not in build("slack", bare)["blocks"][0]["text"]["text"].split("\n")[0]
    assert "actions" not in build("teams", bare)["attachments"][0]["content"]
