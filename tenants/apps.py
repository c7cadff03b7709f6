from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Berth tenants"

    def ready(self) -> None:
        from tenants import signals  # noqa: F401  (auth events → audit trail)
