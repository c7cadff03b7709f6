"""Portal API tokens."""

from __future__ import annotations

from django.db import models

from tenants.models.people import Team, User


class ApiToken(models.Model):
    """A portal API token: only its SHA-256 is stored; the plaintext is shown once."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    team = models.ForeignKey(
        Team,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="api_tokens",
        help_text="Set for automation tokens that act for one team only.",
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
