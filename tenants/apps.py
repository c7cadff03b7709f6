from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Berth tenants"

    def ready(self) -> None:
        from tenants import checks, signals  # noqa: F401  (system checks; auth events → audit trail)
