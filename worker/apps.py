from functools import wraps

from django.apps import AppConfig


def _cluster_errors_as_domain(fn):
    """Kubernetes trouble reaches the portal as ClusterUnavailable, with the server's message."""
    from tenants.errors import ClusterUnavailable
    from worker.kube import KubeError

    @wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except KubeError as exc:
            raise ClusterUnavailable(str(exc)) from None

    return wrapper


class WorkerConfig(AppConfig):
    name = "worker"
    verbose_name = "Berth worker"

    def ready(self) -> None:
        from tenants import hooks
        from worker import backends, credentials

        hooks.register("manifest_preview", backends.preview_yaml)
        hooks.register("cluster_config_errors", backends.cluster_config_errors)
        hooks.register("issue_kubeconfig", _cluster_errors_as_domain(credentials.issue_kubeconfig))
        hooks.register("issue_merged_kubeconfig", _cluster_errors_as_domain(credentials.issue_merged_kubeconfig))
