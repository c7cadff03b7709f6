"""Sign-in and sign-out land in the audit trail (failed sign-in: tenants.auth.AuditedCallbackView)."""

from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.dispatch import receiver

from tenants import services
from tenants.audit import AuditContext


def _ctx(request) -> AuditContext:
    return AuditContext.from_http(request) if request is not None else AuditContext()


@receiver(user_logged_in)
def _logged_in(sender, request, user, **kwargs) -> None:
    services.auth_record(user=user, action="auth.login", ctx=_ctx(request))


@receiver(user_logged_out)
def _logged_out(sender, request, user, **kwargs) -> None:
    services.auth_record(
        user=user, action="auth.logout", ctx=_ctx(request), actor_name=getattr(user, "username", "") or "anonymous"
    )
