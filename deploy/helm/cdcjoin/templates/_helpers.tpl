{{/* The release's resource name: <release>-cdcjoin, or <release> when it holds "cdcjoin". */}}
{{- define "cdcjoin.fullname" -}}
{{- if contains "cdcjoin" .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-cdcjoin" .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "cdcjoin.selectorLabels" -}}
app.kubernetes.io/name: cdcjoin
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "cdcjoin.labels" -}}
{{ include "cdcjoin.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/*
The job as cdcjoin reads it: .Values.job plus what the deployment owns (state.dir
on the pod's volume, instance_id from the pod's name, the metrics address, the
drain timeout, TLS file paths, credentials as ${ENV} references). Refuses what
must not be in a ConfigMap.
*/}}
{{- define "cdcjoin.job" -}}
{{- $v := .Values -}}
{{- $job := deepCopy $v.job -}}
{{- if not (kindIs "map" $job) -}}{{- fail "job: the job's configuration (a mapping) is required" -}}{{- end -}}
{{- $state := get $job "state" | default dict -}}
{{- if hasKey $state "dir" -}}{{- fail "job.state.dir is set by the chart (the pod's volume): remove it" -}}{{- end -}}
{{- $_ := set $state "dir" "/var/lib/cdcjoin/state" -}}
{{- $_ := set $job "state" $state -}}
{{- $kafka := get $job "kafka" | default dict -}}
{{- range $k := list "instance_id" "metrics_addr" "drain_timeout" "tls" "sasl" -}}
{{- if hasKey $kafka $k -}}{{- fail (printf "job.kafka.%s is set by the chart (see values.yaml): remove it" $k) -}}{{- end -}}
{{- end -}}
{{- if not (get $kafka "brokers") -}}{{- fail "job.kafka.brokers is required" -}}{{- end -}}
{{- $_ := set $kafka "instance_id" "${POD_NAME}" -}}
{{- $_ := set $kafka "metrics_addr" (printf "0.0.0.0:%d" (int $v.metricsPort)) -}}
{{- $_ := set $kafka "drain_timeout" (printf "%ds" (int $v.drainTimeoutSeconds)) -}}
{{- if $v.kafka.tls.enabled -}}
{{- $_ := set $kafka "tls" (include "cdcjoin.tlsFiles" (dict "tls" $v.kafka.tls "dir" "/etc/cdcjoin/kafka-tls") | fromYaml) -}}
{{- end -}}
{{- with $v.kafka.sasl.mechanism -}}
{{- if not (and $v.credentials.kafkaUsernameKey $v.credentials.kafkaPasswordKey) -}}{{- fail "kafka.sasl.mechanism needs credentials.kafkaUsernameKey and credentials.kafkaPasswordKey" -}}{{- end -}}
{{- $_ := set $kafka "sasl" (dict "mechanism" . "username" "${CDCJOIN_KAFKA_USERNAME}" "password" "${CDCJOIN_KAFKA_PASSWORD}") -}}
{{- end -}}
{{- $_ := set $job "kafka" $kafka -}}
{{- with get $job "clickhouse" -}}
{{- $ch := . -}}
{{- range $k := list "password" "username" "tls" -}}
{{- if hasKey $ch $k -}}{{- fail (printf "job.clickhouse.%s is set by the chart (credentials and clickhouse.tls in values.yaml): remove it" $k) -}}{{- end -}}
{{- end -}}
{{- if $v.credentials.clickhouseUsernameKey -}}{{- $_ := set . "username" "${CDCJOIN_CLICKHOUSE_USERNAME}" -}}{{- end -}}
{{- if $v.credentials.clickhousePasswordKey -}}{{- $_ := set . "password" "${CDCJOIN_CLICKHOUSE_PASSWORD}" -}}{{- end -}}
{{- if $v.clickhouse.tls.enabled -}}
{{- $_ := set . "tls" (include "cdcjoin.tlsFiles" (dict "tls" $v.clickhouse.tls "dir" "/etc/cdcjoin/clickhouse-tls") | fromYaml) -}}
{{- end -}}
{{- end -}}
{{- toYaml $job -}}
{{- end -}}

{{/* tlsFiles: the tls section of a client (kafka or clickhouse) with the files mounted at .dir. */}}
{{- define "cdcjoin.tlsFiles" -}}
enabled: true
{{- with .tls.caKey }}
ca_file: {{ printf "%s/%s" $.dir . }}
{{- end }}
{{- if and .tls.certKey .tls.keyKey }}
cert_file: {{ printf "%s/%s" .dir .tls.certKey }}
key_file: {{ printf "%s/%s" .dir .tls.keyKey }}
{{- else if or .tls.certKey .tls.keyKey }}
{{- fail "tls.certKey and tls.keyKey go together" }}
{{- end }}
{{- end -}}

{{/* secretEnv NAME KEY: an environment variable from the credentials Secret. */}}
{{- define "cdcjoin.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end -}}
