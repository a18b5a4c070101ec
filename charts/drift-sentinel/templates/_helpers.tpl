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

{{/* securityContext of every container of the agent pods. */}}
{{- define "drift-sentinel.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
Absolute directory of the export channels: `audit.exportConnection.path` as the agent resolves it
(a relative path against its working directory `/`, which the Deployment sets), cleaned.
*/}}
{{- define "drift-sentinel.exportPath" -}}
{{- $path := .Values.audit.exportConnection.path }}
{{- if not (hasPrefix "/" $path) }}
{{- $path = printf "/%s" $path }}
{{- end }}
{{- clean $path }}
{{- end }}

{{/*
Checks of the export values, which fail rendering with a message naming them. Included by the
templates that use them; renders nothing.
*/}}
{{- define "drift-sentinel.validateExport" -}}
{{- if .Values.enableAdmissionViolationExport }}
{{- if ne .Values.exportBackend "disk" }}
{{- fail (printf "exportBackend must be \"disk\" when enableAdmissionViolationExport is true (got %q): admission violation export supports only the disk driver" .Values.exportBackend) }}
{{- end }}
{{- $mount := clean .Values.audit.exportVolumeMount.path }}
{{- $path := include "drift-sentinel.exportPath" . }}
{{- if or (eq $mount "/") (not (hasPrefix (printf "%s/" $mount) $path)) }}
{{- $resolved := "" }}
{{- if not (hasPrefix "/" .Values.audit.exportConnection.path) }}
{{- $resolved = printf " (resolved against /, the agent's working directory: %q)" $path }}
{{- end }}
{{- fail (printf "audit.exportConnection.path %q%s is not inside audit.exportVolumeMount.path %q: the agent's root filesystem is read-only, so the export directory must be below the mounted volume" .Values.audit.exportConnection.path $resolved .Values.audit.exportVolumeMount.path) }}
{{- end }}
{{- $volume := .Values.audit.exportVolume }}
{{- if has $volume.name (list "tls" "tmp") }}
{{- fail (printf "audit.exportVolume.name %q is taken by a volume of the chart (tls, tmp): choose another name" $volume.name) }}
{{- end }}
{{- $sources := list }}
{{- range $key, $value := $volume }}
{{- if and (ne $key "name") (not (kindIs "invalid" $value)) }}
{{- $sources = append $sources $key }}
{{- end }}
{{- end }}
{{- if ne (len $sources) 1 }}
{{- fail (printf "audit.exportVolume must have exactly one volume source besides its name (got %s): to replace the default emptyDir, also set audit.exportVolume.emptyDir to null" (toJson $sources)) }}
{{- end }}
{{- if or (eq $mount "/tmp") (eq $mount "/etc/drift-sentinel/tls") (hasPrefix "/etc/drift-sentinel/tls/" $mount) }}
{{- fail (printf "audit.exportVolumeMount.path %q collides with a volume of the chart (/tmp, /etc/drift-sentinel/tls): choose another directory, such as /tmp/violations" .Values.audit.exportVolumeMount.path) }}
{{- end }}
{{- end }}
{{- end }}
