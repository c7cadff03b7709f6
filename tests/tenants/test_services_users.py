"""tenants.services.user_sync_from_claims: the IdP's groups claim decides teams, roles and platform roles."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from tenants import services
from tenants.models import AuditEvent, Membership, Team, User

from .conftest import CTX

pytestmark = pytest.mark.django_db


def sync(groups=None, *, sub: str = "sub-nina", **claims) -> User:
    claims = {"sub": sub, "preferred_username": "nina", "email": "nina@example.test", "name": "Nina N", **claims}
    if groups is not None:
        claims["groups"] = groups
    return services.user_sync_from_claims(claims=claims, ctx=CTX)


def roles(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("team__slug", "role"))


def test_a_first_sign_in_creates_the_user_from_claims():
    user = sync(["team-pay"])
    assert (user.username, user.email, user.display_name, user.oidc_subject) == (
        "nina",
        "nina@example.test",
        "Nina N",
        "sub-nina",
    )
    assert not (user.is_platform_admin or user.is_approver or user.is_staff or user.is_superuser)


def test_the_same_subject_is_the_same_user_even_after_a_rename():
    first = sync(["team-pay"])
    again = sync(["team-pay"], preferred_username="nina.new", email="n@example.test")
    assert again.pk == first.pk and again.username == "nina" and again.email == "n@example.test"


def test_a_username_taken_by_another_subject_gets_a_suffix(alice):
    user = sync(["team-pay"], sub="other-alice", preferred_username="alice")
    assert user.username == "alice-2" and user.pk != alice.pk


def test_claims_without_a_subject_are_refused():
    with pytest.raises(ValidationError):
        services.user_sync_from_claims(claims={"preferred_username": "x", "groups": []})


@pytest.mark.parametrize(
    ("group", "role"),
    [("team-pay", "member"), ("team-pay:owner", "owner"), ("team-pay:member", "member"), ("team-pay:viewer", "viewer")],
)
def test_team_groups_become_memberships_with_their_role(group, role):
    assert roles(sync([group])) == {"team-pay": role}


def test_a_team_seen_for_the_first_time_is_created_from_its_group():
    sync(["team-data-platform"])
    team = Team.objects.get(oidc_group="team-data-platform")
    assert (team.slug, team.name) == ("team-data-platform", "Data Platform")


@pytest.mark.parametrize(
    "groups",
    [
        ["team-pay:viewer", "team-pay", "team-pay:owner"],
        ["team-pay:owner", "team-pay:viewer"],
        ["team-pay", "team-pay:owner"],
    ],
)
def test_the_highest_role_wins_whatever_the_order(groups):
    assert roles(sync(groups)) == {"team-pay": "owner"}


def test_groups_without_the_team_prefix_or_with_an_unknown_role_are_ignored():
    user = sync(["developers", "/team-pay", "Team-pay", "team-ops:admin", "team-pay:viewer", 42, None, {"x": 1}])
    assert roles(user) == {"team-pay": "viewer"}
    assert not Team.objects.filter(oidc_group__in=["developers", "/team-pay", "team-ops"]).exists()


def test_the_admin_group_makes_a_platform_admin_and_the_approver_group_an_approver():
    admin = sync(["berth-admins"])
    assert admin.is_platform_admin and admin.is_staff and admin.is_superuser and not admin.is_approver
    approver = sync(["berth-approvers"], sub="sub-ivy", preferred_username="ivy")
    assert approver.is_approver and not approver.is_platform_admin and not approver.is_staff


def test_losing_the_admin_group_at_the_idp_removes_admin_rights_and_is_audited():
    sync(["berth-admins", "team-pay"])
    user = sync(["team-pay"])
    assert not (user.is_platform_admin or user.is_staff or user.is_superuser)
    changes = list(
        AuditEvent.objects.filter(action="user.platform_roles").order_by("id").values_list("before", "after")
    )
    assert changes == [({"roles": []}, {"roles": ["admin"]}), ({"roles": ["admin"]}, {"roles": []})]


def test_a_group_removed_at_the_idp_removes_the_membership_on_next_sync_and_is_audited():
    user = sync(["team-pay:owner", "team-ops"])
    user = sync(["team-ops"])
    assert roles(user) == {"team-ops": "member"}
    removed = AuditEvent.objects.get(action="membership.remove")
    assert (removed.actor, removed.team.slug, removed.before) == (user, "team-pay", {"user": "nina", "role": "owner"})
    assert removed.request_id == CTX.request_id and removed.source_ip == CTX.source_ip


def test_a_role_change_at_the_idp_is_mirrored_and_audited():
    sync(["team-pay:owner"])
    user = sync(["team-pay:viewer"])
    assert roles(user) == {"team-pay": "viewer"}
    change = AuditEvent.objects.get(action="membership.change")
    assert (change.before, change.after) == ({"role": "owner"}, {"user": "nina", "role": "viewer"})


def test_an_unchanged_sign_in_writes_no_membership_events():
    sync(["team-pay"])
    count = AuditEvent.objects.count()
    sync(["team-pay"])
    assert AuditEvent.objects.count() == count


def test_claims_without_a_groups_key_leave_memberships_and_platform_roles_alone():
    sync(["team-pay:owner", "berth-approvers"])
    user = sync(None, name="Nina Renamed")
    assert roles(user) == {"team-pay": "owner"} and user.is_approver
    assert user.display_name == "Nina Renamed"


def test_an_empty_groups_claim_removes_every_membership():
    sync(["team-pay", "berth-approvers"])
    user = sync([])
    assert roles(user) == {} and not user.is_approver


def test_a_single_group_sent_as_a_string_counts_as_that_group():
    # Some IdPs send a one-element claim as a plain string; iterating it would mean 'no groups' and drop everything.
    assert roles(sync("team-pay:owner")) == {"team-pay": "owner"}


def test_membership_changes_for_team_a_come_from_its_oidc_group(team_a):
    user = sync(["team-a:owner"])
    assert Membership.objects.get(user=user).team == team_a


# --- hostile or unlucky claims: clear errors, never a 500 ---------------------------------------------


def test_long_group_names_that_share_a_prefix_become_distinct_teams():
    first, second = "team-" + "x" * 60 + "-a", "team-" + "x" * 60 + "-b"
    user = sync([first, second])
    teams = Team.objects.filter(oidc_group__in=[first, second])
    assert teams.count() == 2 and len({t.slug for t in teams}) == 2
    assert all(len(t.slug) <= 50 for t in teams) and set(roles(user)) == {t.slug for t in teams}
    assert services.team_slug(first) == services.team_slug(first)  # stable across sign-ins


def test_a_group_that_is_no_slug_gets_one():
    sync(["team-pay.eu"])
    slug = Team.objects.get(oidc_group="team-pay.eu").slug
    assert slug.startswith("team-payeu-") and slug != services.team_slug("team-payeu")


def test_a_slug_held_by_another_team_is_a_clear_error(dave):
    Team.objects.create(slug=services.team_slug("team-pay.eu"), name="Taken", oidc_group="something-else")
    with pytest.raises(ValidationError) as refused:
        sync(["team-pay.eu"])
    assert "belongs to the group 'something-else'" in refused.value.message_dict["groups"][0]
    assert not User.objects.filter(oidc_subject="sub-nina").exists()  # the sign-in changed nothing


@pytest.mark.parametrize(
    ("claims", "field"),
    [({"sub": "s" * 300}, "sub"), ({"groups": ["team-" + "g" * 300]}, "groups")],
)
def test_oversized_claims_are_refused_with_a_reason(claims, field):
    with pytest.raises(ValidationError) as refused:
        services.user_sync_from_claims(claims={"sub": "sub-x", "preferred_username": "x", **claims}, ctx=CTX)
    assert field in refused.value.message_dict
