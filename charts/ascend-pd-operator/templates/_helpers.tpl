{{/* Names, labels and shared pieces of the ascend-pd-operator chart. */}}

{{- define "ascend-pd-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every resource name. Truncated so that the longest suffix the chart adds
("-test") still leaves a valid DNS label.
*/}}
{{- define "ascend-pd-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 52 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "ascend-pd-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "ascend-pd-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ascend-pd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of everything in the release, without the component. */}}
{{- define "ascend-pd-operator.commonLabels" -}}
helm.sh/chart: {{ include "ascend-pd-operator.chart" . }}
app.kubernetes.io/name: {{ include "ascend-pd-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: ascend-pd
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "ascend-pd-operator.labels" -}}
{{ include "ascend-pd-operator.commonLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* The helm test's objects: never matched by the operator's selectors. */}}
{{- define "ascend-pd-operator.testLabels" -}}
{{ include "ascend-pd-operator.commonLabels" . }}
app.kubernetes.io/component: test
{{- end }}

{{- define "ascend-pd-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "ascend-pd-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository@digest when a digest pins the image, else repository:tag (appVersion by default). */}}
{{- define "ascend-pd-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespace the helm test uses: the first watched one, else the release namespace. */}}
{{- define "ascend-pd-operator.testNamespace" -}}
{{- if .Values.watch.namespaces }}
{{- first .Values.watch.namespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The namespace NOTES.txt puts the first PDDeployment in: the first watched one, else "llm".
*/}}
{{- define "ascend-pd-operator.exampleNamespace" -}}
{{- if .Values.watch.namespaces }}
{{- first .Values.watch.namespaces }}
{{- else }}
{{- print "llm" }}
{{- end }}
{{- end }}

{{/*
Pod Security Standard "restricted", shared by the operator and the helm test pods. The
UID/GID match the user created in operator/Dockerfile.
*/}}
{{- define "ascend-pd-operator.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "ascend-pd-operator.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* 1.28 and 1.29 (the oldest supported, `kubeVersion` in Chart.yaml) refuse a rule whose
cost their CEL cannot bound (`ascend-pd crd --k8s 1.28`). */}}
{{- define "ascend-pd-operator.crdVariant" -}}
{{- if semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version }}
{{- print "cel" }}
{{- else }}
{{- print "cel-1.28" }}
{{- end }}
{{- end }}

{{/* "true" when the ServiceMonitor and PodMonitor are rendered: monitoring.mode "always", or
"auto" on a cluster that serves the Prometheus Operator's API (monitoring.coreos.com/v1). */}}
{{- define "ascend-pd-operator.monitoring" -}}
{{- if or (eq .Values.monitoring.mode "always") (and (eq .Values.monitoring.mode "auto") (.Capabilities.APIVersions.Has "monitoring.coreos.com/v1")) }}
{{- print "true" }}
{{- end }}
{{- end }}

{{/* The operator's metrics Service exists when asked for or when a ServiceMonitor needs it. */}}
{{- define "ascend-pd-operator.metricsService" -}}
{{- if or .Values.metrics.enabled (and (include "ascend-pd-operator.monitoring" .) .Values.monitoring.serviceMonitor.enabled) }}
{{- print "true" }}
{{- end }}
{{- end }}
