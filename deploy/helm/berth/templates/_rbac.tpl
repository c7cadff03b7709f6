{{/*
Every permission Berth holds on a cluster, in one place. docs/security.md explains the design; in short:

- Cluster-wide, the worker holds only what cannot be scoped to a namespace: creating namespaces, bootstrapping
  RoleBindings in them, its cluster-scoped objects (the guards, by name; per-tenant FlowSchemas) and reading
  storage and priority classes.
- Inside each namespace it creates, the worker writes RoleBindings (BERTH_NAMESPACE_GRANTS) that give itself and
  the web the "-namespace" ClusterRoles below there, and nowhere else. RBAC lets only someone who holds a
  permission grant it: holding the tenant Roles' rules in Berth namespaces alone is what lets the worker write
  them, without `escalate`, and without being able to read a Secret anywhere else.
- `bind` on exactly those two ClusterRoles is what lets the worker create the first RoleBindings in a new
  namespace; the confinement policy (confinement.yaml) refuses them outside namespaces labelled
  app.kubernetes.io/managed-by=berth, which only the worker's own namespace creation can produce.

Extend the part that needs it (and say why), or use rbac.extraClusterRules / rbac.extraNamespaceRules.
*/}}

{{/* The cluster-wide guards (worker/guards.py GUARDS; tests/deploy checks the list matches). */}}
{{- define "berth.rbac.guardNames" -}}
- berth-no-long-lived-tokens
- berth-no-external-ips
- berth-no-external-name
- berth-no-manual-endpoints
- berth-ingress-hosts
- berth-projected-token-lifetime
- berth-no-berth-service-accounts
- berth-node-pool-tolerations
- berth-storage-classes
{{- end -}}

{{- define "berth.rbac.allVerbs" -}}[get, list, watch, create, update, patch, delete, deletecollection]{{- end -}}
{{- define "berth.rbac.readVerbs" -}}[get, list, watch]{{- end -}}

{{/* Watcher, cluster-wide (ClusterRoleBinding): read-only. It lists and watches, with Berth's label selector, every
kind Berth makes a namespace tenant of (worker/reconcile.py MANAGED_KINDS; tests/deploy checks the list matches),
never Secrets, and reads the storage and priority class names the quota is rendered from. RBAC cannot scope a list
by label: what it may read is every object of these kinds, in every namespace (docs/security.md). No verb writes. */}}
{{- define "berth.rbac.watcher.cluster" -}}
- apiGroups: [""]
  resources: [namespaces, serviceaccounts, resourcequotas, limitranges]
  verbs: {{ include "berth.rbac.readVerbs" . }}
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: {{ include "berth.rbac.readVerbs" . }}
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: {{ include "berth.rbac.readVerbs" . }}
- apiGroups: [flowcontrol.apiserver.k8s.io]
  resources: [flowschemas]
  verbs: {{ include "berth.rbac.readVerbs" . }}
# What Berth renders depends on which classes exist (the quota zeroes those a tier does not allow): names only.
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [list]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [list]
{{- end -}}

{{/* Worker, cluster-wide (ClusterRoleBinding). */}}
{{- define "berth.rbac.worker.cluster" -}}
# Provisioning: is the name free, is this namespace the tenant's (its labels), which physical cluster is this
# (kube-system's UID). Namespace metadata only; nothing inside them.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
# Provisioning: a new tenant namespace. Creation cannot be scoped by name; the confinement policy requires the
# managed-by label. Changing or deleting a namespace comes from the namespace grant, so only Berth's own.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [create]
# Provisioning: the first RoleBindings in a new namespace (the namespace grants). Confined to Berth namespaces by
# the confinement policy; reading, changing and deleting RoleBindings come from the namespace grant.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [rolebindings]
  verbs: [create]
# Provisioning: those RoleBindings may reference these two ClusterRoles, and no other, before the worker holds
# what they grant.
- apiGroups: [rbac.authorization.k8s.io]
  resources: [clusterroles]
  verbs: [bind]
  resourceNames:
    - {{ include "berth.component" (dict "root" . "name" "worker-namespace") }}
    - {{ include "berth.component" (dict "root" . "name" "web-namespace") }}
# Provisioning and reconcile: the cluster-wide admission guards, by name (server-side apply creates and patches).
- apiGroups: [admissionregistration.k8s.io]
  resources: [validatingadmissionpolicies, validatingadmissionpolicybindings]
  verbs: [get, create, patch]
  resourceNames:
    {{- include "berth.rbac.guardNames" . | nindent 4 }}
# Provisioning, reconcile, decommission: a tier's API fairness level is a FlowSchema per tenant (berth-<namespace>).
# RBAC cannot scope names by prefix; the confinement policy keeps writes to FlowSchemas labelled as Berth's.
- apiGroups: [flowcontrol.apiserver.k8s.io]
  resources: [flowschemas]
  verbs: [get, create, patch, delete]
# Provisioning: which storage and priority classes exist, so the quota can zero those a tier does not allow.
- apiGroups: [storage.k8s.io]
  resources: [storageclasses]
  verbs: [list]
- apiGroups: [scheduling.k8s.io]
  resources: [priorityclasses]
  verbs: [list]
# Isolation report (worker/netprobe.py): where the nodes and the API server are, to prove with packets that a
# tenant's pods reach them only as its tier says. Node objects and the one Service and Endpoints, read-only.
- apiGroups: [""]
  resources: [nodes]
  verbs: [list]
- apiGroups: [""]
  resources: [services, endpoints]
  verbs: [get]
  resourceNames: [kubernetes]
{{- if .Values.rbac.oidcIsolationImpersonation }}
# Isolation report on clusters in access mode oidc: act as the team's group. As strong as cluster-admin (anyone
# may be impersonated); turned on by rbac.oidcIsolationImpersonation.
- apiGroups: [""]
  resources: [users, groups]
  verbs: [impersonate]
{{- end }}
{{- if has "kcp" .Values.rbac.virtualClusterKinds }}
# kcp tenants: a Workspace per tenant in the parent workspace.
- apiGroups: [tenancy.kcp.io]
  resources: [workspaces]
  verbs: [get, create, patch, delete]
{{- end }}
{{- if has "capn" .Values.rbac.virtualClusterKinds }}
# VirtualCluster tenants: the admin's ClusterVersion must exist.
- apiGroups: [tenancy.x-k8s.io]
  resources: [clusterversions]
  verbs: [get]
{{- end }}
{{- with .Values.rbac.extraClusterRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Worker, inside every Berth namespace (a RoleBinding the worker writes there). */}}
{{- define "berth.rbac.worker.namespace" -}}
# Provisioning, reconcile, decommission: the namespace itself. A RoleBinding in namespace X covers the Namespace
# object X and no other: apply its labels and annotations, delete it when the tenant goes.
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get, patch, delete]
# Provisioning and reconcile: Berth's own objects in the namespace (apply, drift check, prune on tier changes),
# and reading quota usage.
- apiGroups: [""]
  resources: [resourcequotas, limitranges]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [rbac.authorization.k8s.io]
  resources: [roles, rolebindings]
  verbs: [get, list, watch, create, patch, delete]
# Kubeconfigs and isolation reports: short-lived tokens of the tenant's ServiceAccounts.
- apiGroups: [""]
  resources: [serviceaccounts/token]
  verbs: [create]
# Granting the tenant Roles (manifests.tenant_role, viewer_role): RBAC lets only someone who holds a permission
# grant it, so the worker holds here what the team's Roles give. The guard probes (server-side dry runs of a
# Secret, Service, Endpoints, Ingress, Pods and a PersistentVolumeClaim) use these create rights too.
- apiGroups: [""]
  resources:
    - pods
    - pods/log
    - pods/exec
    - pods/attach
    - pods/portforward
    - pods/eviction
    - services
    - endpoints
    - configmaps
    - secrets
    - persistentvolumeclaims
    - serviceaccounts
    - replicationcontrollers
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [""]
  resources: [events, pods/status]
  verbs: {{ include "berth.rbac.readVerbs" . }}
- apiGroups: [apps]
  resources: [deployments, statefulsets, replicasets, daemonsets, deployments/scale, statefulsets/scale]
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [batch]
  resources: [jobs, cronjobs]
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [autoscaling]
  resources: [horizontalpodautoscalers]
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [policy]
  resources: [poddisruptionbudgets]
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [networking.k8s.io]
  resources: [ingresses]
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: {{ include "berth.rbac.allVerbs" . }}
- apiGroups: [metrics.k8s.io]
  resources: [pods]
  verbs: [get, list]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: {{ include "berth.rbac.readVerbs" . }}
# The viewer Role reads every resource of these groups.
- apiGroups: [apps, batch, autoscaling, policy, networking.k8s.io]
  resources: ["*"]
  verbs: {{ include "berth.rbac.readVerbs" . }}
{{- if .Values.rbac.virtualClusterKinds }}
# Virtual clusters: the host namespace holds the control plane the installer (helm, Flux, Cluster API) creates,
# and the worker reads its admin kubeconfig Secret (covered above).
- apiGroups: [""]
  resources: [pods/ephemeralcontainers]
  verbs: [patch, update]
- apiGroups: [""]
  resources: [events]
  verbs: [create]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: {{ include "berth.rbac.allVerbs" . }}
{{- end }}
{{- if has "vcluster" .Values.rbac.virtualClusterKinds }}
- apiGroups: [source.toolkit.fluxcd.io]
  resources: [helmrepositories]
  verbs: [get, create, patch, delete]
- apiGroups: [helm.toolkit.fluxcd.io]
  resources: [helmreleases]
  verbs: [get, create, patch, delete]
- apiGroups: [cluster.x-k8s.io]
  resources: [clusters]
  verbs: [get, create, patch, delete]
- apiGroups: [infrastructure.cluster.x-k8s.io]
  resources: [vclusters]
  verbs: [get, create, patch, delete]
{{- end }}
{{- if has "capn" .Values.rbac.virtualClusterKinds }}
- apiGroups: [tenancy.x-k8s.io]
  resources: [virtualclusters]
  verbs: [get, create, patch, delete]
{{- end }}
{{- if has "hypershift" .Values.rbac.virtualClusterKinds }}
- apiGroups: [hypershift.openshift.io]
  resources: [hostedclusters, nodepools]
  verbs: [get, create, patch, delete]
{{- end }}
{{- with .Values.rbac.extraNamespaceRules }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Web, cluster-wide: the request form's quick look (is the name free, which physical cluster is this). */}}
{{- define "berth.rbac.web.cluster" -}}
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
{{- end -}}

{{/* Web, inside every Berth namespace: kubeconfigs, and the tenant page's reads of events and logs, are short-lived
     tokens of the tenant's two ServiceAccounts. */}}
{{- define "berth.rbac.web.namespace" -}}
- apiGroups: [""]
  resources: [serviceaccounts/token]
  verbs: [create]
  resourceNames: [berth-tenant, berth-viewer]
{{- if .Values.rbac.virtualClusterKinds }}
# Virtual clusters: the control plane's admin kubeconfig, to mint the tenant's tokens inside it.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
{{- end }}
{{- end -}}

{{/* BERTH_NAMESPACE_GRANTS: "<ClusterRole>=<namespace>/<ServiceAccount>", the worker's first. */}}
{{- define "berth.namespaceGrants" -}}
{{- $ns := .Release.Namespace -}}
{{- printf "%s=%s/%s,%s=%s/%s"
      (include "berth.component" (dict "root" . "name" "worker-namespace")) $ns (include "berth.serviceAccount.worker" .)
      (include "berth.component" (dict "root" . "name" "web-namespace")) $ns (include "berth.serviceAccount.web" .) -}}
{{- end -}}
