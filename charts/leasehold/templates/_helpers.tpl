{{/* Chart name, overridable with nameOverride. */}}
{{- define "leasehold.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Fully qualified name: the release name when it already contains the chart name. Also the
prefix of every cluster-scoped object, so several releases can live in one cluster. */}}
{{- define "leasehold.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "leasehold.selectorLabels" -}}
app.kubernetes.io/name: {{ include "leasehold.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "leasehold.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "leasehold.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: leasehold
{{- end -}}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "leasehold.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "leasehold.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The user name the API server gives the operator: the only identity the admission policies
let remove the scheduling gate, set fencing tokens, and change a lock Lease's holder. */}}
{{- define "leasehold.operatorUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "leasehold.serviceAccountName" .) -}}
{{- end -}}

{{- define "leasehold.leaderLeaseName" -}}
{{- default (include "leasehold.fullname" .) .Values.leaderElection.leaseName -}}
{{- end -}}

{{- define "leasehold.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* CEL: true when the request comes from the operator or from a member of an exempt group. */}}
{{- define "leasehold.celExempt" -}}
request.userInfo.username == {{ include "leasehold.operatorUsername" . | squote }} || request.userInfo.groups.exists(g, g in [{{ range $i, $g := .Values.admissionPolicies.exemptGroups }}{{ if $i }}, {{ end }}{{ $g | squote }}{{ end }}])
{{- end -}}

{{/* RE2 (CEL matches): a leasehold.dev/max-wait value in humantime's grammar, the parser the
operator uses (src/lock/policy.rs): spans of a number, a fraction allowed, and a unit. No
backslash, so it can sit in a CEL string as it is. Kept equal to the parser by
tests/chart.rs (max_wait_admission_pattern_matches_the_operators_parser). */}}
{{- define "leasehold.maxWaitPattern" -}}
^[[:space:]]*([0-9]+([.][0-9]+)?[[:space:]]*(nanos|nsec|ns|usec|us|µs|millis|msec|ms|seconds|second|secs|sec|s|minutes|minute|mins|min|m|hours|hour|hrs|hr|h|days|day|d|weeks|week|wks|wk|w|months|month|M|years|year|yrs|yr|y)[[:space:]]*)+$
{{- end -}}

{{/* The namespace the operator serves with rbac.scope Namespace. */}}
{{- define "leasehold.servedNamespace" -}}
{{- default .Release.Namespace .Values.rbac.namespace }}
{{- end }}

{{/* The namespaceSelector of the admission policy bindings: admissionPolicies.namespaceSelector
     when set; with rbac.scope Namespace, the served namespace only (other namespaces have no
     operator here, and a pod gated there would wait for nobody); else none (every namespace). */}}
{{- define "leasehold.policyNamespaceSelector" -}}
{{- if .Values.admissionPolicies.namespaceSelector }}
{{- toYaml .Values.admissionPolicies.namespaceSelector }}
{{- else if eq .Values.rbac.scope "Namespace" }}
matchLabels:
  kubernetes.io/metadata.name: {{ include "leasehold.servedNamespace" . }}
{{- end }}
{{- end }}
