"""Outbound webhooks: signed events for the endpoints platform admins and team owners register.

- ``payloads``: what an event says, as Berth's versioned JSON or as a Slack message;
- ``signing``: Standard Webhooks signatures (HMAC-SHA256 over id, timestamp and body);
- ``targets``: which URLs and addresses a webhook may reach (SSRF), checked on save and before every attempt;
- ``sender``: one POST to a checked address, bounded by a deadline, never following redirects;
- ``outbox``: the deliveries an event owes, written in the transaction of the change that caused it.

Deliveries are sent by the worker (``worker/events.py``, the ``events`` queue) through
``tenants.services.webhook_deliver``, in order per endpoint and tenant.
"""
