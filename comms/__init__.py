"""Status updates and where they are sent: a team's chat webhooks (Slack, Mattermost,
Microsoft Teams). Above investigations in the layers: it reads investigations and writes
their timeline; nothing below imports it (the investigation and team pages reach it
through its template tags)."""
