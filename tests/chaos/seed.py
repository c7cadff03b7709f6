"""The cast of a chaos bed, written into its own database: ``python -m tests.chaos.seed < spec.json``.

Run as a separate process on the bed's DATABASE_URL (the test process's Django is on the run's shared database).
Reads {"prefix", "api_url", "ca_pem", "kubeconfig", "teams"} and prints the tokens and ids the burst uses.
"""

from __future__ import annotations

import json
import sys

import django


def main() -> None:
    django.setup()
    from django.test import Client
    from django.utils import timezone

    from tenants import services
    from tenants.models import Cluster, Membership, Team, Tier, User

    spec = json.load(sys.stdin)
    prefix = spec["prefix"]
    cluster = Cluster.objects.create(
        name=f"chaos-{prefix.rstrip('-')}",
        display_name="Chaos",
        api_url=spec["api_url"],
        ca_pem=spec["ca_pem"],
        credential_ref=f"kubeconfig:{spec['kubeconfig']}",
        public_endpoint=spec["api_url"],
        namespace_prefix=prefix,
        kinds=["namespace"],
    )
    cluster.tiers.set(Tier.objects.all())

    def person(username: str, **flags: bool) -> User:
        return User.objects.create(
            username=username,
            email=f"{username}@example.test",
            oidc_subject=f"sub-{username}",
            identity_checked_at=timezone.now(),
            **flags,
        )

    approver = person("approver", is_approver=True)
    teams = []
    for number in range(1, spec["teams"] + 1):
        # Room for every lane's tenant at the largest tier: the budget is not what the chaos tests.
        team = Team.objects.create(
            slug=f"chaos-{number}",
            name=f"Chaos {number}",
            oidc_group=f"chaos-{number}",
            budget_cpu_millis=200_000,
            budget_memory_mib=400_000,
            budget_storage_gib=5_000,
        )
        owner = person(f"owner-{number}")
        Membership.objects.create(user=owner, team=team, role=Membership.Role.OWNER)
        token = services.api_token_create(actor=owner, name="chaos", expires_in_days=1)[1]
        teams.append({"slug": team.slug, "owner": owner.username, "token": token})
    browser = Client()
    browser.force_login(approver)
    json.dump(
        {
            "cluster": cluster.name,
            "cluster_id": str(cluster.pk),
            "teams": teams,
            "approver_token": services.api_token_create(actor=approver, name="chaos", expires_in_days=1)[1],
            "approver_session": browser.cookies["sessionid"].value,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
