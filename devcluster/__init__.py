"""Dev Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) for tests and demos.

See devcluster.launcher.ControlPlane and docs/devcluster.md.
"""
