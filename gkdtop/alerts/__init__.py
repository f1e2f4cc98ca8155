"""Telling people who are not looking: events from the store (stalled, failed, recovered, finished,
heartbeat), sent through apprise and counted for Prometheus. `gkdtop watch`, the dashboard and
`serve` share it (docs/alerts.md)."""
