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

{{/* Labels of the audit's objects (its Deployment, ServiceAccount and RBAC). */}}
{{- define "drift-sentinel.auditLabels" -}}
{{ include "drift-sentinel.commonLabels" . }}
app.kubernetes.io/component: audit
{{- end }}

{{/* Labels that select the audit pods (`kubectl drift status --audit-selector`). */}}
{{- define "drift-sentinel.auditSelectorLabels" -}}
app.kubernetes.io/name: {{ include "drift-sentinel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: audit
{{- end }}

{{/* Name of the audit's objects. */}}
{{- define "drift-sentinel.auditName" -}}
{{- printf "%s-audit" (include "drift-sentinel.fullname" .) }}
{{- end }}

{{/* ServiceAccount of the audit: its own when the chart creates them (its RBAC differs from the
webhook's), else `serviceAccount.name` (or `default`), as the webhook's. */}}
{{- define "drift-sentinel.auditServiceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- include "drift-sentinel.auditName" . }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The resources the webhook intercepts (`webhook.rules`, subresources left out) as
`group/resource,…`: what a rule selector with `*` audits (`--audit-resources`), and what the
audit may list.
*/}}
{{- define "drift-sentinel.auditResources" -}}
{{- $found := list }}
{{- range .Values.webhook.rules }}
{{- $rule := . }}
{{- range $rule.apiGroups }}
{{- $group := . }}
{{- range $rule.resources }}
{{- if not (contains "/" .) }}
{{- $found = append $found (printf "%s/%s" $group .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- join "," (uniq $found) }}
{{- end }}

{{/*
Where the audit writes results besides the export (`--audit-reports`): `audit.reports`, where
`auto` means `openreports` when the cluster serves openreports.io/v1alpha1 (or the chart installs
its CRDs) and `none` otherwise.
*/}}
{{- define "drift-sentinel.auditReports" -}}
{{- if ne .Values.audit.reports "auto" }}
{{- .Values.audit.reports }}
{{- else if or .Values.openreports.installCRDs (.Capabilities.APIVersions.Has "openreports.io/v1alpha1/Report") }}
{{- "openreports" }}
{{- else }}
{{- "none" }}
{{- end }}
{{- end }}

{{/* Whether an export (the webhook's or the audit's) is on: the Connection, its RBAC and the
checks of the export values. */}}
{{- define "drift-sentinel.anyExport" -}}
{{- if or .Values.enableAdmissionViolationExport (and .Values.audit.enabled .Values.enableViolationExport) }}true{{ end }}
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
{{- if include "drift-sentinel.anyExport" . }}
{{- if ne .Values.exportBackend "disk" }}
{{- $which := ternary "enableAdmissionViolationExport" "enableViolationExport" .Values.enableAdmissionViolationExport }}
{{- $what := ternary "admission violation export" "audit violation export" .Values.enableAdmissionViolationExport }}
{{- fail (printf "exportBackend must be \"disk\" when %s is true (got %q): %s supports only the disk driver" $which .Values.exportBackend $what) }}
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
{{- $tlsDir := include "drift-sentinel.tlsDir" . }}
{{- if or (eq $mount "/tmp") (eq $mount $tlsDir) (hasPrefix (printf "%s/" $tlsDir) $mount) }}
{{- fail (printf "audit.exportVolumeMount.path %q collides with a volume of the chart (/tmp, %s): choose another directory, such as /tmp/violations" .Values.audit.exportVolumeMount.path $tlsDir) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Number of agent pods: `replicaCount`, or when it is empty 3 with `webhook.failurePolicy: Fail`
(a drain must never take the last pod of a fail-closed webhook) and 2 otherwise.
*/}}
{{- define "drift-sentinel.replicas" -}}
{{- if kindIs "invalid" .Values.replicaCount }}
{{- ternary 3 2 (eq .Values.webhook.failurePolicy "Fail") }}
{{- else }}
{{- int .Values.replicaCount }}
{{- end }}
{{- end }}

{{/* Name of the Secret the pods mount: the render-time one, or the one cert-manager writes. */}}
{{- define "drift-sentinel.tlsSecretName" -}}
{{- if .Values.certManager.enabled }}
{{- printf "%s-tls" (include "drift-sentinel.fullname" .) }}
{{- else }}
{{- include "drift-sentinel.certSecretName" . }}
{{- end }}
{{- end }}

{{/* Directory of tls.certFile and tls.keyFile, where the TLS Secret is mounted. */}}
{{- define "drift-sentinel.tlsDir" -}}
{{- dir (clean .Values.tls.certFile) }}
{{- end }}

{{/*
Checks of the values that the schema cannot express, failing rendering with a message naming the
value. Included by the Deployment; renders nothing.
*/}}
{{- define "drift-sentinel.validate" -}}
{{- $cert := clean .Values.tls.certFile }}
{{- $key := clean .Values.tls.keyFile }}
{{- if ne (dir $cert) (dir $key) }}
{{- fail (printf "tls.certFile %q and tls.keyFile %q must be in the same directory: the TLS Secret is mounted at that directory" .Values.tls.certFile .Values.tls.keyFile) }}
{{- end }}
{{- if eq (base $cert) (base $key) }}
{{- fail (printf "tls.certFile %q and tls.keyFile %q must be different files" .Values.tls.certFile .Values.tls.keyFile) }}
{{- end }}
{{- $tlsDir := dir $cert }}
{{- if or (eq $tlsDir "/") (eq $tlsDir "/tmp") (hasPrefix "/tmp/" $tlsDir) }}
{{- fail (printf "tls.certFile %q: its directory %q would hide the pod's root or scratch directory /tmp when the TLS Secret is mounted there; choose a directory of its own, such as /tls" .Values.tls.certFile $tlsDir) }}
{{- end }}
{{- if include "drift-sentinel.anyExport" . }}
{{- $mount := clean .Values.audit.exportVolumeMount.path }}
{{- if or (eq $tlsDir $mount) (hasPrefix (printf "%s/" $mount) $tlsDir) (hasPrefix (printf "%s/" $tlsDir) $mount) }}
{{- fail (printf "tls.certFile %q and audit.exportVolumeMount.path %q overlap: the TLS Secret and the export volume need directories of their own" .Values.tls.certFile .Values.audit.exportVolumeMount.path) }}
{{- end }}
{{- end }}
{{- $reserved := dict
  "DRIFT_SENTINEL_ADDRESS" "service.targetPort (the agent listens on :<service.targetPort>, the container port and probes follow it)"
  "DRIFT_SENTINEL_TLS_CERT_FILE" "tls.certFile"
  "DRIFT_SENTINEL_TLS_KEY_FILE" "tls.keyFile"
  "DRIFT_SENTINEL_TLS_MIN_VERSION" "tls.minVersion"
  "DRIFT_SENTINEL_CLIENT_CA_FILE" "webhook.clientAuth (caBundle or caSecret)"
  "DRIFT_SENTINEL_CLIENT_NAMES" "webhook.clientAuth.names"
  "DRIFT_SENTINEL_ENABLE_ADMISSION_VIOLATION_EXPORT" "enableAdmissionViolationExport (it also mounts the export volume and grants the Connection's RBAC)"
  "DRIFT_SENTINEL_EVENTS" "events.enabled"
  "DRIFT_SENTINEL_AUDIT_CONNECTION" "audit.connection"
  "DRIFT_SENTINEL_AUDIT_CHANNEL" "audit.channel"
  "DRIFT_SENTINEL_EXPORT_ROOT" "audit.exportVolumeMount.path (the export root is the export volume)"
  "DRIFT_SENTINEL_SHUTDOWN_DELAY" "shutdown.delaySeconds (the pod's terminationGracePeriodSeconds follows it)"
  "DRIFT_SENTINEL_SHUTDOWN_TIMEOUT" "shutdown.timeoutSeconds (the pod's terminationGracePeriodSeconds follows it)"
  "DRIFT_SENTINEL_LAST_GOOD_CONFIGMAP" "nothing: the chart creates the last-good ConfigMap and grants it by name"
  "DRIFT_SENTINEL_CLUSTER_RULE_NAMESPACES" "clusterRuleNamespaces"
  "DRIFT_SENTINEL_VALIDATE_RULE_PATH" "nothing: the rule webhook calls /validate-rule"
  "DRIFT_SENTINEL_VALIDATE_PATH" "nothing: the webhook configuration calls /validate"
  "DRIFT_SENTINEL_HEALTH_PATH" "nothing: the liveness probe asks /healthz"
  "DRIFT_SENTINEL_READY_PATH" "nothing: the readiness probe asks /readyz"
  "DRIFT_SENTINEL_METRICS_PATH" "nothing: the ServiceMonitor scrapes /metrics" }}
{{- $seen := dict }}
{{- range $i, $e := .Values.env }}
{{- if hasKey $reserved $e.name }}
{{- fail (printf "env[%d] sets %s, which the chart wires itself; set %s instead" $i $e.name (index $reserved $e.name)) }}
{{- end }}
{{- if hasKey $seen $e.name }}
{{- fail (printf "env[%d] sets %s a second time: each variable may appear once in env" $i $e.name) }}
{{- end }}
{{- $_ := set $seen $e.name true }}
{{- end }}
{{- with .Values.webhook.clientAuth }}
{{- if and .enabled (not .caBundle) (not .caSecret.name) }}
{{- fail "webhook.clientAuth.enabled needs the CA of the API server's client certificate: set webhook.clientAuth.caBundle (PEM) or webhook.clientAuth.caSecret.name" }}
{{- end }}
{{- if and .caBundle .caSecret.name }}
{{- fail "webhook.clientAuth.caBundle and webhook.clientAuth.caSecret.name are both set: give the CA one way" }}
{{- end }}
{{- end }}
{{- $sel := .Values.webhook.namespaceSelector }}
{{- if $sel }}
{{- if and (has $sel.operator (list "In" "NotIn")) (empty $sel.values) }}
{{- fail (printf "webhook.namespaceSelector.values must not be empty with operator %s" $sel.operator) }}
{{- end }}
{{- end }}
{{- $names := dict }}
{{- range $i, $c := .Values.webhook.matchConditions }}
{{- if hasKey $names $c.name }}
{{- fail (printf "webhook.matchConditions[%d].name %q is used twice: each condition needs its own name" $i $c.name) }}
{{- end }}
{{- $_ := set $names $c.name true }}
{{- end }}
{{- if and .Values.webhook.matchConditions (not (semverCompare ">=1.28.0-0" .Capabilities.KubeVersion.Version)) }}
{{- fail (printf "webhook.matchConditions needs Kubernetes 1.28 or newer (the API server is %s): leave it empty on this cluster" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- end }}

{{/* The ConfigMap where the agent keeps the last valid version of each rule (reference §2). */}}
{{- define "drift-sentinel.lastGoodName" -}}
{{ include "drift-sentinel.fullname" . }}-last-good-rules
{{- end }}

{{/* The URL of the rule webhook when webhook.url is set: webhook.validateRules.url, or
webhook.url with its /validate path replaced by /validate-rule. */}}
{{- define "drift-sentinel.ruleWebhookUrl" -}}
{{- if .Values.webhook.validateRules.url }}
{{- .Values.webhook.validateRules.url }}
{{- else if hasSuffix "/validate" .Values.webhook.url }}
{{- printf "%s-rule" .Values.webhook.url }}
{{- else }}
{{- fail (printf "webhook.url %q does not end with /validate: set webhook.validateRules.url to the agent's /validate-rule URL (or webhook.validateRules.enabled: false)" .Values.webhook.url) }}
{{- end }}
{{- end }}

{{/*
The file name of the client CA in its volume: the Secret's key, or the chart's ConfigMap's.
*/}}
{{- define "drift-sentinel.clientCaKey" -}}
{{- if .Values.webhook.clientAuth.caSecret.name }}{{ .Values.webhook.clientAuth.caSecret.key | default "ca.crt" }}{{ else }}ca.crt{{ end }}
{{- end }}

{{/*
The ConfigMap where this release's webhook publishes the public halves of its record keys
(reference §8 "Trust"): one per release, so two releases in one namespace never share it.
*/}}
{{- define "drift-sentinel.recordPublicKeyName" -}}
{{- printf "%s-record-public-key" (include "drift-sentinel.fullname" .) }}
{{- end }}

{{/*
The previous public keys still trusted after a rotation (events.recordKey.previousPublicKeys),
one per line, checked: at most 16, each the base64 of 32 bytes.
*/}}
{{- define "drift-sentinel.recordPreviousKeys" -}}
{{- $keys := .Values.events.recordKey.previousPublicKeys | default list }}
{{- if gt (len $keys) 16 }}
{{- fail (printf "events.recordKey.previousPublicKeys lists %d keys, at most 16: keep only those whose records still matter" (len $keys)) }}
{{- end }}
{{- range $i, $key := $keys }}
{{- if not (regexMatch "^[A-Za-z0-9+/]{43}=$" (toString $key)) }}
{{- fail (printf "events.recordKey.previousPublicKeys[%d] is not an Ed25519 public key: give the base64 of 32 bytes, as data.ed25519 of the ConfigMap %s showed it before the rotation" $i (include "drift-sentinel.recordPublicKeyName" $)) }}
{{- end }}
{{- end }}
{{- join "\n" $keys }}
{{- end }}
