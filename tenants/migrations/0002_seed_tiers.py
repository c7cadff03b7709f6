"""Three sensible tiers to start from; admins edit or retire them in the admin."""

from django.db import migrations

TIERS = [
    dict(
        name="small",
        display_name="Small",
        order=1,
        auto_approve=True,
        description="For experiments and CI: 2 CPU, 4 GiB, restricted pods, auto-approved, 14 days.",
        cpu_request_millis=1000,
        cpu_limit_millis=2000,
        memory_request_mib=2048,
        memory_limit_mib=4096,
        storage_gib=10,
        max_pods=20,
        max_services=10,
        max_load_balancers=0,
        max_pvcs=5,
        max_configmaps=50,
        max_secrets=50,
        default_cpu_request_millis=50,
        default_cpu_limit_millis=250,
        default_memory_request_mib=64,
        default_memory_limit_mib=256,
        pod_security_level="restricted",
        network_profile="isolated",
        api_fairness="workload-low",
        max_credential_lifetime_seconds=3600,
        default_expiry_days=14,
        max_expiry_days=30,
    ),
    dict(
        name="medium",
        display_name="Medium",
        order=2,
        auto_approve=False,
        description="For a team's services: 8 CPU, 16 GiB, ingress allowed, approval needed, 90 days.",
        cpu_request_millis=4000,
        cpu_limit_millis=8000,
        memory_request_mib=8192,
        memory_limit_mib=16384,
        storage_gib=100,
        max_pods=100,
        max_services=30,
        max_load_balancers=1,
        max_pvcs=20,
        max_configmaps=200,
        max_secrets=200,
        default_cpu_request_millis=100,
        default_cpu_limit_millis=500,
        default_memory_request_mib=128,
        default_memory_limit_mib=512,
        pod_security_level="restricted",
        network_profile="ingress",
        api_fairness="",
        max_credential_lifetime_seconds=8 * 3600,
        default_expiry_days=90,
        max_expiry_days=180,
    ),
    dict(
        name="large",
        display_name="Large (dedicated nodes)",
        order=3,
        auto_approve=False,
        description="For steady production load: 32 CPU, 64 GiB on the dedicated node pool, 180 days.",
        cpu_request_millis=16000,
        cpu_limit_millis=32000,
        memory_request_mib=32768,
        memory_limit_mib=65536,
        storage_gib=500,
        max_pods=400,
        max_services=100,
        max_load_balancers=3,
        max_pvcs=100,
        max_configmaps=500,
        max_secrets=500,
        default_cpu_request_millis=250,
        default_cpu_limit_millis=1000,
        default_memory_request_mib=256,
        default_memory_limit_mib=1024,
        pod_security_level="restricted",
        network_profile="ingress",
        api_fairness="workload-high",
        node_selector={"berth.dev/pool": "dedicated"},
        allowed_priority_classes=["berth-high"],
        max_credential_lifetime_seconds=12 * 3600,
        default_expiry_days=180,
        max_expiry_days=365,
    ),
]


def seed(apps, schema_editor):
    Tier = apps.get_model("tenants", "Tier")
    for tier in TIERS:
        Tier.objects.update_or_create(name=tier["name"], defaults=tier)


def unseed(apps, schema_editor):
    apps.get_model("tenants", "Tier").objects.filter(name__in=[t["name"] for t in TIERS], tenants__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("tenants", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
