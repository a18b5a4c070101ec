{{/* Name of the chart, or nameOverride. */}}
{{- define "drift-sentinel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name of the release's objects: fullnameOverride, else `<release>` when the release name
already contains the chart name, else `<release>-<chart>`. At most 58 characters, so that
`<fullname>-cert` (the TLS Secret) and the other suffixed names stay within 63.
*/}}
{{- define "drift-sentinel.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 58 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 58 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 58 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "drift-sentinel.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every object of the release, without the component. */}}
{{- define "drift-sentinel.commonLabels" -}}
helm.sh/chart: {{ include "drift-sentinel.chart" . }}
app.kubernetes.io/name: {{ include "drift-sentinel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: drift-sentinel
{{- end }}

{{/* Labels of the webhook's objects. */}}
{{- define "drift-sentinel.labels" -}}
{{ include "drift-sentinel.commonLabels" . }}
app.kubernetes.io/component: webhook
{{- end }}

{{/* Labels of the rule ConfigMaps. */}}
{{- define "drift-sentinel.ruleLabels" -}}
{{ include "drift-sentinel.commonLabels" . }}
app.kubernetes.io/component: rule
{{- end }}

{{/* Labels that select the agent pods. */}}
{{- define "drift-sentinel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "drift-sentinel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end }}

{{- define "drift-sentinel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "drift-sentinel.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "drift-sentinel.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Name of the Secret holding the webhook's CA and serving certificate. */}}
{{- define "drift-sentinel.certSecretName" -}}
{{- printf "%s-cert" (include "drift-sentinel.fullname" .) }}
{{- end }}

{{/* Namespaces the webhook never intercepts: the release's own, kube-system, and the listed ones. */}}
{{- define "drift-sentinel.excludedNamespaces" -}}
{{- $names := concat (list .Release.Namespace "kube-system") .Values.webhook.excludeNamespaces | uniq }}
{{- toJson $names }}
{{- end }}

{{/*
The webhook's TLS material, as YAML with base64 values: `caCert`, `tlsCert`, `tlsKey`, and
`reused` (true when taken from an existing Secret). The Secret `<fullname>-cert` in the release
namespace is reused when it exists with `ca.crt`, `tls.crt` and `tls.key` (upgrades keep their
certificate, and the caBundle stays that of the CA that signed it); otherwise a new CA and a
serving certificate for the Service's DNS names are generated. Include this ONCE per render (in
templates/webhook.yaml, which renders both the Secret and the caBundle from that one result):
every include generates new keys.
*/}}
{{- define "drift-sentinel.tls" -}}
{{- $secret := lookup "v1" "Secret" .Release.Namespace (include "drift-sentinel.certSecretName" .) }}
{{- $data := dict }}
{{- if and $secret $secret.data }}
{{- $data = $secret.data }}
{{- end }}
{{- if and (index $data "ca.crt") (index $data "tls.crt") (index $data "tls.key") }}
caCert: {{ index $data "ca.crt" | quote }}
tlsCert: {{ index $data "tls.crt" | quote }}
tlsKey: {{ index $data "tls.key" | quote }}
reused: true
{{- else }}
{{- $service := include "drift-sentinel.fullname" . }}
{{- $namespace := .Release.Namespace }}
{{- $days := int .Values.certificate.validityDays }}
{{- $dnsNames := list $service (printf "%s.%s" $service $namespace) (printf "%s.%s.svc" $service $namespace) (printf "%s.%s.svc.%s" $service $namespace .Values.clusterDomain) }}
{{- $ca := genCA (printf "%s-ca" $service) $days }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service $namespace) nil $dnsNames $days $ca }}
caCert: {{ $ca.Cert | b64enc | quote }}
tlsCert: {{ $cert.Cert | b64enc | quote }}
tlsKey: {{ $cert.Key | b64enc | quote }}
reused: false
{{- end }}
{{- end }}
