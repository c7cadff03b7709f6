"""People and their teams: users (mirrored from the OIDC provider), teams and memberships."""

from __future__ import annotations

from collections.abc import Iterator

from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models import Q
from django.utils.crypto import salted_hmac

from tenants.validation import validate_time_zone


class User(AbstractUser):
    """A person signed in through OIDC; platform roles are mirrored from groups on each login."""

    oidc_subject = models.CharField(max_length=255, unique=True, null=True, blank=True)
    display_name = models.CharField(max_length=255, blank=True)
    is_platform_admin = models.BooleanField(default=False)
    is_approver = models.BooleanField(default=False)
    # When the provider last confirmed who this person is and which groups they are in (a sign-in, a
    # bearer token with groups, or a re-check with the refresh token); API tokens need it to be recent.
    identity_checked_at = models.DateTimeField(null=True, blank=True, editable=False)
    # The provider's refresh token, sealed (tenants.sealing): how Berth re-checks groups without the person.
    idp_refresh_token = models.TextField(blank=True, editable=False)
    # When the provider last refused that refresh token: the session there was over. Portal sessions, API tokens
    # and access tokens from before it are not honoured until the person signs in again.
    idp_session_ended_at = models.DateTimeField(null=True, blank=True, editable=False)
    # This person's team ids when the request's authentication read them along with its credential (an API token,
    # tenants.api.authentication), for the scope of what the request may list; None: the selectors read them.
    credential_team_ids: list[int] | None = None

    @property
    def can_decide(self) -> bool:
        return self.is_platform_admin or self.is_approver

    def get_session_auth_hash(self) -> str:
        """Django checks every request's session against this: once the provider has ended this person's
        session, the portal sessions signed in before that no longer match and are flushed."""
        return self._with_session_end(super().get_session_auth_hash())

    def get_session_auth_fallback_hash(self) -> Iterator[str]:
        for password_hash in super().get_session_auth_fallback_hash():
            yield self._with_session_end(password_hash)

    def _with_session_end(self, password_hash: str) -> str:
        if self.idp_session_ended_at is None:
            return password_hash  # Django's own: sessions made before this field existed stay valid
        ended = f"{password_hash}|{self.idp_session_ended_at.isoformat()}"
        return salted_hmac("tenants.models.User.idp_session_ended_at", ended, algorithm="sha256").hexdigest()

    @property
    def platform_roles(self) -> list[str]:
        return [role for role, has in (("admin", self.is_platform_admin), ("approver", self.is_approver)) if has]

    def __str__(self) -> str:
        return self.display_name or self.username


class Team(models.Model):
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    oidc_group = models.CharField(max_length=255, unique=True, help_text="The groups-claim value that makes a member.")
    contact_email = models.EmailField(blank=True)
    # The team's budget: the sum of its live tenants' tier allocations may not exceed it.
    budget_cpu_millis = models.PositiveIntegerField(default=16000, help_text="CPU limit budget in millicores.")
    budget_memory_mib = models.PositiveIntegerField(default=32768, help_text="Memory limit budget in MiB.")
    budget_storage_gib = models.PositiveIntegerField(default=500)
    budget_tenants = models.PositiveIntegerField(default=10)
    # Where the team works: sleep schedules ("nights and weekends") are read in this IANA time zone.
    time_zone = models.CharField(max_length=64, default="UTC", validators=[validate_time_zone])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"
        VIEWER = "viewer", "Viewer"

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_unique_user_team"),
            models.CheckConstraint(condition=Q(role__in=["owner", "member", "viewer"]), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"
