{{/* Names and labels. */}}
{{- define "inferq.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "inferq.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "ingest"). */}}
{{- define "inferq.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "inferq.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The one drain bound every service is configured with; the grace periods are derived from it. */}}
{{- define "inferq.drainSeconds" -}}
{{- int .Values.shutdown.drainTimeoutSeconds -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: (dict "root" $ "preStop" true|false). */}}
{{- define "inferq.graceSeconds" -}}
{{- $s := .root.Values.shutdown -}}
{{- $pre := ternary (int $s.preStopSleepSeconds) 0 .preStop -}}
{{- add $pre (int $s.drainTimeoutSeconds) (int $s.marginSeconds) -}}
{{- end -}}

{{/* Refusals: values that would make a broken or unsafe release. */}}
{{- define "inferq.validate" -}}
{{- if not .Values.tenants.existingSecret -}}
{{- fail "tenants.existingSecret is required: ingest and results listen on every address, which open mode (no tenants file) refuses" -}}
{{- end -}}
{{- range $name, $_ := .Values.settings -}}
{{- if regexMatch "(?i)(PASSWORD|SECRET|API_KEY|TOKEN)" $name -}}
{{- fail (printf "settings.%s looks secret and would land in a ConfigMap: name a Secret in secretEnv instead" $name) -}}
{{- end -}}
{{- if has $name (list "INFERQ_DISPATCHER_DRAIN_TIMEOUT_S" "INFERQ_DRAIN_TIMEOUT_S" "INFERQ_HTTP_GRACEFUL_SHUTDOWN_S") -}}
{{- fail (printf "settings.%s is set from shutdown.drainTimeoutSeconds (the grace periods are derived from it)" $name) -}}
{{- end -}}
{{- if has $name (list "INFERQ_BUDGET" "INFERQ_INGEST_ADMISSION_BUDGET" "INFERQ_COORDINATION" "INFERQ_TENANTS_FILE" "INFERQ_RESULTS_DB_PATH") -}}
{{- fail (printf "settings.%s is set by the chart (dispatcher.budget, dispatcher.coordination, tenants, results.persistence)" $name) -}}
{{- end -}}
{{- end -}}
{{- if lt (int .Values.shutdown.marginSeconds) 10 -}}
{{- fail "shutdown.marginSeconds must be at least 10: ingest's producer flush alone may take 10 s" -}}
{{- end -}}
{{- if and (gt (int .Values.dispatcher.replicas) 1) (ne .Values.dispatcher.coordination "redis") -}}
{{- fail "dispatcher.replicas > 1 needs dispatcher.coordination redis: each member would otherwise hold the whole budget" -}}
{{- end -}}
{{- if regexMatch "://[^/@]*:[^/@]*@" (toString .Values.redis.url) -}}
{{- fail "redis.url carries a password, which would land in a ConfigMap: put it in a Secret (secretEnv INFERQ_REDIS_PASSWORD)" -}}
{{- end -}}
{{- if and (eq .Values.dispatcher.coordination "redis") (not .Values.redis.url) -}}
{{- fail "dispatcher.coordination redis needs redis.url" -}}
{{- end -}}
{{- end -}}

{{/* Environment every inferq container gets: settings (ConfigMap), secrets, tenants file. */}}
{{- define "inferq.env" -}}
- name: INFERQ_TENANTS_FILE
  value: /etc/inferq/tenants/{{ .Values.tenants.key }}
{{- with .Values.kafka.sasl.existingSecret }}
- name: INFERQ_KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: {{ $.Values.kafka.sasl.usernameKey }}}
- name: INFERQ_KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: {{ $.Values.kafka.sasl.passwordKey }}}
{{- end }}
{{- if .Values.kafka.tls.caSecret }}
- name: INFERQ_KAFKA_SSL_CA_FILE
  value: /etc/inferq/kafka-ca/{{ .Values.kafka.tls.caKey }}
{{- end }}
{{- range $name, $ref := .Values.secretEnv }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef: {name: {{ $ref.secretName }}, key: {{ $ref.key }}}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "inferq.envFrom" -}}
- configMapRef:
    name: {{ include "inferq.fullname" . }}-settings
{{- end -}}

{{/* Mounts every inferq container has: /tmp, the tenants file, the Kafka CA. */}}
{{- define "inferq.volumeMounts" -}}
- name: tmp
  mountPath: /tmp
- name: tenants
  mountPath: /etc/inferq/tenants
  readOnly: true
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  mountPath: /etc/inferq/kafka-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* The tenants Secret is mounted as a directory (not subPath): an update reaches the file, which the services reload. */}}
{{- define "inferq.volumes" -}}
- name: tmp
  emptyDir: {sizeLimit: 64Mi}
- name: tenants
  secret:
    secretName: {{ .Values.tenants.existingSecret }}
    items:
      - {key: {{ .Values.tenants.key }}, path: {{ .Values.tenants.key }}}
{{- if .Values.kafka.tls.caSecret }}
- name: kafka-ca
  secret:
    secretName: {{ .Values.kafka.tls.caSecret }}
{{- end }}
{{- end -}}

{{/* Probes on a port: readiness /readyz, liveness /healthz, start-up /healthz. */}}
{{- define "inferq.probes" -}}
{{- $p := .root.Values.probes -}}
startupProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ $p.startup.periodSeconds }}
  timeoutSeconds: {{ $p.startup.timeoutSeconds }}
  failureThreshold: {{ $p.startup.failureThreshold }}
readinessProbe:
  httpGet: {path: /readyz, port: {{ .port }}}
  periodSeconds: {{ $p.readiness.periodSeconds }}
  timeoutSeconds: {{ $p.readiness.timeoutSeconds }}
  failureThreshold: {{ $p.readiness.failureThreshold }}
livenessProbe:
  httpGet: {path: /healthz, port: {{ .port }}}
  periodSeconds: {{ $p.liveness.periodSeconds }}
  timeoutSeconds: {{ $p.liveness.timeoutSeconds }}
  failureThreshold: {{ $p.liveness.failureThreshold }}
{{- end -}}

{{- define "inferq.podAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
checksum/settings: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
{{- end -}}
