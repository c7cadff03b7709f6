{{/*
The alert rules (a Prometheus rule file's `groups`), for the PrometheusRule and the rules ConfigMap alike.
tests/deploy renders them and runs `promtool test rules` against tests/deploy/alerts_test.yaml. The metrics are
listed in docs/deployment.md (Monitoring).
*/}}
{{- define "berth.alertGroups" -}}
{{- $a := .Values.monitoring.alerts -}}
{{- $extra := $a.labels | default dict -}}
- name: berth
  rules:
    - alert: BerthProvisioningStuck
      # The oldest tenant waiting in approved or provisioning: the worker is down, the queue is lost (the sweep
      # re-sends after BERTH_STUCK_AFTER_SECONDS) or the cluster never becomes ready.
      expr: max by (status) (berth_tenant_oldest_seconds{status=~"approved|provisioning"}) > {{ $a.provisioningStuckSeconds }}
      for: 5m
      labels:
        severity: warning
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: A tenant has been {{ "{{ $labels.status }}" }} for {{ "{{ $value | humanizeDuration }}" }}.
        description: >-
          Provisioning has not finished. Look at the tenant's status reason in the portal, the worker logs and the
          provision queue's length.
    - alert: BerthProvisioningFailing
      # Runs that marked a tenant failed, out of runs that ended (ready or failed), over 30 minutes.
      expr: >-
        sum(rate(berth_provision_runs_total{result="failed"}[30m]))
        / sum(rate(berth_provision_runs_total{result=~"ready|failed"}[30m])) > {{ $a.failureRatio }}
      for: 10m
      labels:
        severity: critical
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: '{{ "{{ $value | humanizePercentage }}" }} of provisioning runs fail.'
        description: >-
          Failed tenants carry the cluster's refusal as their status reason. A sudden rise usually means the
          cluster's credential, RBAC or an admission policy changed.
    - alert: BerthQueueBacklog
      expr: max by (queue) (berth_celery_queue_length) > {{ $a.queueBacklog }}
      for: 10m
      labels:
        severity: warning
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: '{{ "{{ $value }}" }} messages wait in Celery queue {{ "{{ $labels.queue }}" }}.'
        description: >-
          The workers consuming this queue are down, too few or stuck. Scale the queue's worker Deployment or
          look at its logs.
    - alert: BerthReconcileRepairsSpiking
      # Reconcile repairs what was edited or deleted by hand: many repairs mean someone is fighting Berth.
      expr: sum by (cluster) (increase(berth_reconcile_repairs_total[1h])) > {{ $a.reconcileRepairsPerHour }}
      for: 5m
      labels:
        severity: warning
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: Reconcile repaired {{ "{{ $value | humanize }}" }} objects on cluster {{ "{{ $labels.cluster }}" }} in an hour.
        description: >-
          Something changes or deletes Berth's objects (quotas, limits, network policies, RBAC). The audit trail
          lists each repair; the cluster's audit log says who made the change.
    - alert: BerthIsolationReportFailing
      # A ready tenant whose own credentials could do something they must not (or a check could not run). Every web
      # pod reports the same gauge: one alert per tenant, whichever pods were scraped.
      expr: max without (instance, pod) (berth_tenant_isolation_passed) == 0
      for: {{ $a.isolationFailingFor }}
      labels:
        severity: critical
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: The isolation report of tenant {{ "{{ $labels.namespace }}" }} on {{ "{{ $labels.cluster }}" }} fails.
        description: >-
          The tenant's page lists the failed checks. A guard (admission policy), quota or RBAC object may have been
          removed or changed on the cluster.
    - alert: BerthTenantsDiverged
      # Ready in the database, but the namespace Berth recorded is gone or another object: typically after the
      # database was restored from an older dump. Berth changes nothing of it until an admin decides.
      expr: sum by (cluster) (max without (instance, pod) (berth_tenants{status="diverged"})) > 0
      for: 5m
      labels:
        severity: warning
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: '{{ "{{ $value }}" }} tenants on cluster {{ "{{ $labels.cluster }}" }} diverged from the database.'
        description: >-
          Their namespace is gone or was replaced. A platform admin recreates or forgets each one on its page (All
          tenants, quick filter Diverged); see docs/deployment.md, Backup and restore.
    - alert: BerthOrphanNamespaces
      # Berth's namespaces of tenants the database does not know: made after the dump it was restored from.
      expr: max without (instance, pod) (berth_orphan_namespaces) > 0
      for: 5m
      labels:
        severity: warning
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: '{{ "{{ $value }}" }} orphan namespaces on cluster {{ "{{ $labels.cluster }}" }}.'
        description: >-
          Namespaces with Berth's labels that no live tenant has. Berth never deletes them; a platform admin
          re-attaches or decommissions each one (All tenants, Orphan namespaces).
{{- $t := .Values.monitoring.tenantAlerts }}
{{- if $t.enabled }}
{{- /* The sources a namespace label is believed from (tenants/metric_sources.py): the kubelet's job and endpoints,
       and Berth's web job (by default the web Service's name, the job a ServiceMonitor gives its series). */}}
{{- $s := .Values.monitoring.sources }}
{{- $berthJob := $s.berthJob | default (include "berth.component" (dict "root" . "name" "web")) }}
{{- $berth := printf "job=~%q" $berthJob }}
{{- $cadvisor := printf "job=~%q, metrics_path=%q" $s.kubeletJob $s.cadvisorPath }}
{{- $resource := printf "job=~%q, metrics_path=%q" $s.kubeletJob $s.resourcePath }}
{{- $oom := printf "container_oom_events_total{%s, container!=\"\", pod!=\"\"}" $cadvisor }}
# Alerts about tenants' workloads, for Berth's receiver (docs/monitoring.md, Alerts to the team): route
# berth="tenant" to it in your Alertmanager. The same group as tenants/alert_rules.py renders (tests/deploy).
- name: berth-tenants
  rules:
    - alert: BerthTenantQuotaNearlyFull
      # berth_cluster from the gauge's cluster: a rule's label wins over the Prometheus's external labels.
      expr: {{ printf "label_replace(max by (namespace, resource, cluster) (berth_tenant_quota_used{%s} / (berth_tenant_quota_hard{%s} > 0)) >= %v, \"berth_cluster\", \"$1\", \"cluster\", \"(.*)\")" $berth $berth $t.quotaRatio | quote }}
      for: {{ $t.quotaFor }}
      labels:
        severity: warning
        berth: tenant
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: '{{ "{{ $labels.resource }}" }} of the quota is {{ "{{ $value | humanizePercentage }}" }} used.'
    - alert: BerthTenantCrashLooping
      expr: {{ printf "max by (namespace, pod, container) (changes(container_start_time_seconds{%s, container!=\"\", pod!=\"\"}[%s])) >= %v" $resource $t.restartWindow $t.restarts | quote }}
      for: {{ $t.crashLoopFor }}
      labels:
        severity: warning
        berth: tenant
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: 'Container {{ "{{ $labels.container }}" }} of pod {{ "{{ $labels.pod }}" }} restarted {{ "{{ $value }}" }} times in {{ $t.restartWindow }}.'
    - alert: BerthTenantOOMKilled
      # An OOM kill in the window: the counter increased, or it appeared in the window already above zero.
      expr: {{ printf "max by (namespace, pod, container) (increase(%s[%s]) > 0 or (%s > 0 unless %s offset %s))" $oom $t.oomWindow $oom $oom $t.oomWindow | quote }}
      labels:
        severity: warning
        berth: tenant
        {{- with $extra }}{{ toYaml . | nindent 8 }}{{ end }}
      annotations:
        summary: 'Container {{ "{{ $labels.container }}" }} of pod {{ "{{ $labels.pod }}" }} ran out of memory and was killed (OOMKilled).'
{{- end }}
{{- end -}}
