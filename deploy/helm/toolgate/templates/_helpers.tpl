{{/* The release's resource name: <release>-toolgate, or the release name when it says toolgate. */}}
{{- define "toolgate.fullname" -}}
{{- if contains "toolgate" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-toolgate" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "toolgate.headless" -}}
{{- printf "%s-headless" (include "toolgate.fullname" .) -}}
{{- end -}}

{{- define "toolgate.selectorLabels" -}}
app.kubernetes.io/name: toolgate
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "toolgate.labels" -}}
{{ include "toolgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The contract files of the chart's contracts/ folder that the worker loads. */}}
{{- define "toolgate.contractFiles" -}}
{{- range $path, $_ := .Files.Glob "contracts/*/v*/{contract.yaml,schema.json}" }}
{{ $path }}
{{- end }}
{{- end -}}

{{/* A ConfigMap key for a contract file: its path under contracts/ with / as "." */}}
{{- define "toolgate.contractKey" -}}
{{- trimPrefix "contracts/" . | replace "/" "." -}}
{{- end -}}

{{- define "toolgate.maxReplicas" -}}
{{- $max := int .Values.autoscaling.maxReplicas -}}
{{- if gt $max (int .Values.intakePartitions) -}}
{{- fail (printf "autoscaling.maxReplicas %d is more than intakePartitions %d: the extra workers could own no partition" $max (int .Values.intakePartitions)) -}}
{{- end -}}
{{- if lt $max (int .Values.autoscaling.minReplicas) -}}
{{- fail "autoscaling.maxReplicas is less than autoscaling.minReplicas" -}}
{{- end -}}
{{- $max -}}
{{- end -}}
