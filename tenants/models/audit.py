"""The audit trail."""

from __future__ import annotations

import pgtrigger
from django.db import models

from tenants.models.people import Team, User


@pgtrigger.register(
    pgtrigger.Protect(name="audit_append_only", operation=pgtrigger.Update | pgtrigger.Delete),
)
class AuditEvent(models.Model):
    """Append-only: the database refuses UPDATE and DELETE on this table."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(
        User, on_delete=models.DO_NOTHING, null=True, blank=True, db_constraint=False, related_name="+"
    )
    actor_name = models.CharField(max_length=255)
    team = models.ForeignKey(
        Team,
        on_delete=models.DO_NOTHING,
        null=True,
        blank=True,
        db_constraint=False,
        related_name="+",
        db_index=False,  # audit_team_actor leads with the team
    )
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=60, db_index=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)
    user_agent = models.CharField(max_length=400, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["object_type", "object_id"]),
            # A team's page of the API list in its exact order; with the actor in it, the page's visibility test
            # (the caller's teams, or the caller's own actions) is read from the index.
            models.Index(fields=["team", "-at", "-id"], include=["actor"], name="audit_team_newest"),
            # A team's COUNT (the audit page's paginator; the API pages by cursor and does not count), read from the
            # index alone: the team's own index (which this one replaces) had PostgreSQL read every event from the
            # table, as the visibility test needs the actor too.
            models.Index(fields=["team", "actor"], name="audit_team_actor"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name} {self.action}"
