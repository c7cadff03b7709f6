{{/* Names ------------------------------------------------------------------------------------------------- */}}

{{- define "berth.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "berth.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains (include "berth.name" .) .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "berth.name" .) | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* <fullname>-<suffix>: every object's name (the 40-character fullname leaves room for the longest suffix). */}}
{{- define "berth.component" -}}
{{- printf "%s-%s" (include "berth.fullname" .root) .name -}}
{{- end -}}

{{- define "berth.selectorLabels" -}}
app.kubernetes.io/name: {{ include "berth.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "berth.labels" -}}
{{ include "berth.selectorLabels" . }}
app.kubernetes.io/part-of: berth
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The ServiceAccounts: web and worker talk to the cluster; everything else runs as the base one, without a token. */}}
{{- define "berth.serviceAccount.web" -}}{{ include "berth.component" (dict "root" . "name" "web") }}{{- end -}}
{{- define "berth.serviceAccount.watcher" -}}{{ include "berth.component" (dict "root" . "name" "watcher") }}{{- end -}}
{{- define "berth.serviceAccount.worker" -}}{{ include "berth.component" (dict "root" . "name" "worker") }}{{- end -}}
{{- define "berth.serviceAccount.base" -}}{{ include "berth.fullname" . }}{{- end -}}

{{/* Images --------------------------------------------------------------------------------------------------- */}}

{{- define "berth.imageRef" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .root.Chart.AppVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "berth.image" -}}
image: {{ include "berth.imageRef" (dict "root" . "image" .Values.image) | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
{{- end -}}

{{- define "berth.workerImage" -}}
image: {{ include "berth.imageRef" (dict "root" . "image" .Values.workerImage) | quote }}
imagePullPolicy: {{ .Values.workerImage.pullPolicy }}
{{- end -}}

{{/* Security: non-root, read-only, no capabilities (the image's user is berth, 10001). --------------------- */}}

{{- define "berth.podSecurityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .uid | default 10001 }}
  runAsGroup: {{ .uid | default 10001 }}
  fsGroup: {{ .uid | default 10001 }}
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "berth.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{- define "berth.podCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .scheduling.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .scheduling.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .scheduling.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Secrets ------------------------------------------------------------------------------------------------ */}}

{{- define "berth.generatedSecret" -}}{{ include "berth.component" (dict "root" . "name" "generated") }}{{- end -}}

{{- define "berth.postgresql.host" -}}{{ include "berth.component" (dict "root" . "name" "postgresql") }}{{- end -}}
{{- define "berth.redis.host" -}}{{ include "berth.component" (dict "root" . "name" "redis") }}{{- end -}}

{{- define "berth.databaseUrl" -}}
{{- if .Values.bundled.postgresql.enabled -}}
postgres://berth@{{ include "berth.postgresql.host" . }}:5432/berth
{{- else -}}
{{- required "database.url is required (postgres://user@host:5432/db, no password), or bundled.postgresql.enabled=true for a trial" .Values.database.url -}}
{{- end -}}
{{- end -}}

{{/* The files under /run/secrets/berth that the settings read as NAME_FILE (never environment variables: the worker
     runs helm, and children inherit the environment). */}}
{{- define "berth.secretVolume" -}}
- name: secrets
  projected:
    defaultMode: 0440
    sources:
      - secret:
          name: {{ .Values.secretKey.existingSecret | default (include "berth.generatedSecret" .) }}
          items:
            - key: {{ ternary .Values.secretKey.key "secret-key" (ne .Values.secretKey.existingSecret "") }}
              path: django_secret_key
      - secret:
          name: {{ .Values.secretsKey.existingSecret | default (include "berth.generatedSecret" .) }}
          items:
            - key: {{ ternary .Values.secretsKey.key "secrets-key" (ne .Values.secretsKey.existingSecret "") }}
              path: berth_secrets_key
      - secret:
          name: {{ required "oidc.existingSecret is required: a Secret holding the OIDC client secret" .Values.oidc.existingSecret }}
          items:
            - key: {{ .Values.oidc.clientSecretKey }}
              path: oidc_rp_client_secret
      {{- if .Values.monitoring.metrics.enabled }}
      - secret:
          name: {{ required "monitoring.metrics.existingSecret is required: a Secret holding the /metrics bearer token" .Values.monitoring.metrics.existingSecret }}
          items:
            - key: {{ .Values.monitoring.metrics.tokenKey }}
              path: metrics_token
      {{- end }}
      {{- with .Values.monitoring.tenantAlerts.receiver.existingSecret }}
      - secret:
          name: {{ . }}
          items:
            - key: {{ $.Values.monitoring.tenantAlerts.receiver.tokenKey }}
              path: alertmanager_token
      {{- end }}
      {{- if .Values.bundled.postgresql.enabled }}
      - secret:
          name: {{ include "berth.generatedSecret" . }}
          items:
            - key: postgresql-password
              path: postgres_password
      {{- else if .Values.database.existingSecret }}
      - secret:
          name: {{ .Values.database.existingSecret }}
          items:
            - key: {{ .Values.database.passwordKey }}
              path: postgres_password
      {{- end }}
{{- end -}}

{{/* Volumes every portal pod has: secrets, a writable /tmp, and the OIDC provider's CA when given. */}}
{{- define "berth.volumes" -}}
{{ include "berth.secretVolume" . }}
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
{{- if .Values.oidc.caBundleConfigMap }}
- name: oidc-ca
  configMap:
    name: {{ .Values.oidc.caBundleConfigMap }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end -}}

{{- define "berth.volumeMounts" -}}
- name: secrets
  mountPath: /run/secrets/berth
  readOnly: true
- name: tmp
  mountPath: /tmp
{{- if .Values.oidc.caBundleConfigMap }}
- name: oidc-ca
  mountPath: /run/berth/oidc-ca
  readOnly: true
{{- end }}
{{- end -}}

{{- define "berth.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end -}}

{{/* The environment of every portal process (web, workers, beat, migrations): one list, so they cannot drift. */}}
{{- define "berth.env" -}}
{{- $v := .Values -}}
{{- $hosts := $v.config.allowedHosts -}}
{{- $origins := $v.config.csrfTrustedOrigins -}}
{{- if not $origins -}}
{{- range $hosts }}{{ $origins = append $origins (printf "https://%s" .) }}{{ end -}}
{{- end -}}
- name: DJANGO_DEBUG
  value: "false"
- name: DJANGO_SECRET_KEY_FILE
  value: /run/secrets/berth/django_secret_key
- name: BERTH_SECRETS_KEY_FILE
  value: /run/secrets/berth/berth_secrets_key
- name: DJANGO_ALLOWED_HOSTS
  value: {{ join "," $hosts | quote }}
- name: DJANGO_CSRF_TRUSTED_ORIGINS
  value: {{ join "," $origins | quote }}
- name: BERTH_PUBLIC_URL
  value: {{ $v.config.publicUrl | quote }}
- name: DJANGO_SECURE_SSL_REDIRECT
  value: {{ $v.config.secureSslRedirect | quote }}
- name: DJANGO_SECURE_HSTS_SECONDS
  value: {{ $v.config.hstsSeconds | int64 | quote }}
- name: LOG_LEVEL
  value: {{ $v.config.logLevel | quote }}
- name: LOG_FORMAT
  value: json
{{- if $v.monitoring.metrics.enabled }}
- name: BERTH_METRICS_TOKEN_FILE
  value: /run/secrets/berth/metrics_token
{{- end }}
{{- if $v.monitoring.tenantAlerts.receiver.existingSecret }}
- name: BERTH_ALERTMANAGER_TOKEN_FILE
  value: /run/secrets/berth/alertmanager_token
{{- end }}
- name: DATABASE_URL
  value: {{ include "berth.databaseUrl" . | quote }}
{{- if or $v.bundled.postgresql.enabled $v.database.existingSecret }}
- name: PGPASSWORD_FILE
  value: /run/secrets/berth/postgres_password
{{- end }}
- name: DATABASE_CONN_MAX_AGE
  value: {{ $v.database.connMaxAge | int64 | quote }}
{{- if $v.bundled.redis.enabled }}
{{ include "berth.secretEnv" (dict "name" "CELERY_BROKER_URL" "secret" (include "berth.generatedSecret" .) "key" "redis-url") }}
{{- else if $v.redis.existingSecret }}
{{ include "berth.secretEnv" (dict "name" "CELERY_BROKER_URL" "secret" $v.redis.existingSecret "key" $v.redis.urlKey) }}
{{- else }}
- name: CELERY_BROKER_URL
  value: {{ required "redis.url or redis.existingSecret is required, or bundled.redis.enabled=true for a trial" $v.redis.url | quote }}
{{- end }}
{{- if $v.email.existingSecret }}
{{ include "berth.secretEnv" (dict "name" "EMAIL_URL" "secret" $v.email.existingSecret "key" $v.email.urlKey) }}
{{- else if $v.email.url }}
- name: EMAIL_URL
  value: {{ $v.email.url | quote }}
{{- end }}
- name: DEFAULT_FROM_EMAIL
  value: {{ $v.config.defaultFromEmail | quote }}
- name: OIDC_RP_CLIENT_ID
  value: {{ $v.oidc.clientId | quote }}
- name: OIDC_RP_CLIENT_SECRET_FILE
  value: /run/secrets/berth/oidc_rp_client_secret
- name: OIDC_RP_SCOPES
  value: {{ $v.oidc.scopes | quote }}
{{- range $name, $key := dict "OIDC_OP_ISSUER" "issuer" "OIDC_OP_AUTHORIZATION_ENDPOINT" "authorizationEndpoint" "OIDC_OP_TOKEN_ENDPOINT" "tokenEndpoint" "OIDC_OP_USER_ENDPOINT" "userEndpoint" "OIDC_OP_JWKS_ENDPOINT" "jwksEndpoint" "OIDC_OP_LOGOUT_ENDPOINT" "logoutEndpoint" }}
- name: {{ $name }}
  value: {{ required (printf "oidc.%s is required" $key) (get $v.oidc $key) | quote }}
{{- end }}
- name: OIDC_API_AUDIENCE
  value: {{ $v.oidc.apiAudience | quote }}
- name: OIDC_API_CLIENTS
  value: {{ join "," $v.oidc.apiClients | quote }}
- name: OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS
  value: {{ $v.oidc.renewIdTokenExpirySeconds | int64 | quote }}
{{- if $v.oidc.caBundleConfigMap }}
- name: OIDC_CA_BUNDLE
  value: /run/berth/oidc-ca/ca.crt
{{- end }}
- name: BERTH_ADMIN_GROUPS
  value: {{ join "," $v.config.adminGroups | quote }}
- name: BERTH_APPROVER_GROUPS
  value: {{ join "," $v.config.approverGroups | quote }}
- name: BERTH_TEAM_GROUP_PREFIX
  value: {{ $v.config.teamGroupPrefix | quote }}
- name: BERTH_SWEEP_SECONDS
  value: {{ $v.config.sweepSeconds | quote }}
- name: BERTH_RECONCILE_SECONDS
  value: {{ $v.config.reconcileSeconds | quote }}
- name: BERTH_WATCHER
  value: {{ $v.watcher.enabled | quote }}
- name: BERTH_STUCK_AFTER_SECONDS
  value: {{ $v.config.stuckAfterSeconds | int64 | quote }}
- name: BERTH_STUCK_BACKLOG_SECONDS
  value: {{ $v.config.stuckBacklogSeconds | int64 | quote }}
- name: BERTH_PROVISION_TIMEOUT_SECONDS
  value: {{ $v.config.provisionTimeoutSeconds | int64 | quote }}
- name: BERTH_EXPIRY_REMINDER_DAYS
  value: {{ $v.config.expiryReminderDays | int64 | quote }}
- name: BERTH_WRITE_THROTTLE
  value: {{ $v.config.writeThrottle | quote }}
- name: BERTH_IDENTITY_RECHECK_MINUTES
  value: {{ $v.config.identityRecheckMinutes | int64 | quote }}
- name: BERTH_IDENTITY_MAX_AGE_MINUTES
  value: {{ $v.config.identityMaxAgeMinutes | int64 | quote }}
- name: BERTH_AUTH_FAILURES_PER_MINUTE
  value: {{ $v.config.authFailuresPerMinute | int64 | quote }}
- name: BERTH_AUTH_FAILURE_ROWS_PER_MINUTE
  value: {{ $v.config.authFailureRowsPerMinute | int64 | quote }}
- name: BERTH_RESERVED_NAMES
  {{- /* The release's own namespace can never become a tenant. */}}
  value: {{ join "," (uniq (append $v.config.reservedNames .Release.Namespace)) | quote }}
{{- if $v.rbac.create }}
- name: BERTH_NAMESPACE_GRANTS
  value: {{ include "berth.namespaceGrants" . | quote }}
{{- end }}
{{- range $name, $value := $v.config.extraEnv }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- range $name, $ref := $v.config.extraSecretEnv }}
{{ include "berth.secretEnv" (dict "name" $name "secret" $ref.name "key" $ref.key) }}
{{- end }}
{{- end -}}


{{/* Web and worker pods add up their processes' metrics in a directory of their own (prometheus_client's
     multiprocess mode); beat and the migrations record none. */}}
{{- define "berth.metricsEnv" -}}
{{- if .Values.monitoring.metrics.enabled }}
- name: PROMETHEUS_MULTIPROC_DIR
  value: /run/berth/metrics
{{- end }}
{{- end -}}

{{- define "berth.metricsVolume" -}}
{{- if .Values.monitoring.metrics.enabled }}
- name: metrics
  emptyDir:
    medium: Memory
    sizeLimit: 64Mi
{{- end }}
{{- end -}}

{{- define "berth.metricsMount" -}}
{{- if .Values.monitoring.metrics.enabled }}
- name: metrics
  mountPath: /run/berth/metrics
{{- end }}
{{- end -}}

{{- /* Tenant metrics and measured usage (docs/monitoring.md): one prom-label-proxy sidecar per named Prometheus, on
       127.0.0.1 from port 9091 in the names' order. BERTH_PROMETHEUS names, for the web, each one's sidecar
       (label_proxy, for tenants' queries) and the Prometheus itself (url, only to say whether usage can be
       measured); for the workers, only the Prometheus (url), which they read measured usage from. */ -}}
{{- define "berth.tenantMetricsEnv" -}}
{{- $entries := dict }}
{{- range $i, $name := keys .Values.monitoring.tenantMetrics.prometheus | sortAlpha }}
{{- $_ := set $entries $name (dict "label_proxy" (printf "http://127.0.0.1:%d" (add 9091 $i)) "url" (index $.Values.monitoring.tenantMetrics.prometheus $name)) }}
{{- end }}
{{- if $entries }}
- name: BERTH_PROMETHEUS
  value: {{ $entries | toJson | quote }}
{{- end }}
{{- end -}}

{{- define "berth.measuredUsageEnv" -}}
{{- $entries := dict }}
{{- range $name, $url := .Values.monitoring.tenantMetrics.prometheus }}
{{- $_ := set $entries $name (dict "url" $url) }}
{{- end }}
{{- if $entries }}
- name: BERTH_PROMETHEUS
  value: {{ $entries | toJson | quote }}
{{- $sources := .Values.monitoring.sources }}
- name: BERTH_KUBELET_JOB
  value: {{ $sources.kubeletJob | quote }}
- name: BERTH_KUBELET_CADVISOR_PATH
  value: {{ $sources.cadvisorPath | quote }}
- name: BERTH_KUBELET_RESOURCE_PATH
  value: {{ $sources.resourcePath | quote }}
{{- end }}
{{- end -}}

{{- define "berth.tenantMetricsSidecars" -}}
{{- $metrics := .Values.monitoring.tenantMetrics }}
{{- $image := $metrics.labelProxy.image }}
{{- range $i, $name := keys $metrics.prometheus | sortAlpha }}
- name: prom-label-proxy-{{ $name }}
  image: "{{ $image.repository }}{{ if $image.digest }}@{{ $image.digest }}{{ else }}:{{ $image.tag }}{{ end }}"
  imagePullPolicy: {{ $image.pullPolicy }}
  args:
    - -label=namespace
    - -header-name=X-Berth-Namespace
    - -enable-label-apis
    - -upstream={{ index $metrics.prometheus $name }}
    - -insecure-listen-address=127.0.0.1:{{ add 9091 $i }}
  resources:
    {{- toYaml $metrics.labelProxy.resources | nindent 4 }}
  {{- include "berth.containerSecurityContext" $ | nindent 2 }}
{{- end }}
{{- end -}}
