{{/*
Names. Kubernetes object names are limited to 63 characters for DNS.
*/}}
{{- define "sloscope.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "sloscope.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "sloscope.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels: the selector labels never change after install; the rest may.
*/}}
{{- define "sloscope.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sloscope.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "sloscope.labels" -}}
helm.sh/chart: {{ include "sloscope.chart" . }}
{{ include "sloscope.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sloscope
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels of the objects prometheus-operator and Grafana's sidecar select: the common ones plus additionalLabels
(`release: kube-prometheus-stack` and the like).
*/}}
{{- define "sloscope.monitoringLabels" -}}
{{ include "sloscope.labels" . }}
{{- with .Values.additionalLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "sloscope.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sloscope.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "sloscope.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Where the projected config volume puts the two files; the settings name the spec relative to themselves.
*/}}
{{- define "sloscope.configDir" -}}/etc/sloscope{{- end }}

{{/*
Where the listeners' TLS Secret and token Secret are mounted (whole directories: updates reach the pod).
*/}}
{{- define "sloscope.tlsDir" -}}/etc/sloscope-tls{{- end }}
{{- define "sloscope.authDir" -}}/etc/sloscope-auth{{- end }}

{{/*
Whether the metrics listener serves TLS; "true" or "".
*/}}
{{- define "sloscope.metricsTLS" -}}
{{- if and .Values.tls.enabled (has "metrics" .Values.tls.listeners) }}true{{- end }}
{{- end }}

{{/*
The scrape endpoint's scheme, tlsConfig and authorization for the ServiceMonitor and the PodMonitor, as YAML
(prometheus-operator monitoring.coreos.com/v1 Endpoint and PodMetricsEndpoint fields).
*/}}
{{- define "sloscope.scrapeSecurity" -}}
{{- if include "sloscope.metricsTLS" . }}
scheme: https
tlsConfig:
  {{- with .Values.tls.scrape.caKey }}
  ca:
    secret: {name: {{ $.Values.tls.secretName }}, key: {{ . }}}
  {{- end }}
  {{- with .Values.tls.scrape.serverName }}
  serverName: {{ . }}
  {{- end }}
  {{- if .Values.tls.scrape.insecureSkipVerify }}
  insecureSkipVerify: true
  {{- end }}
  {{- with .Values.tls.scrape.clientSecretName }}
  cert:
    secret: {name: {{ . }}, key: tls.crt}
  keySecret: {name: {{ . }}, key: tls.key}
  {{- end }}
{{- end }}
{{- if and .Values.auth.enabled (has "metrics" .Values.auth.listeners) }}
authorization:
  type: Bearer
  credentials: {name: {{ .Values.auth.secretName }}, key: {{ .Values.auth.tokenKey }}}
{{- end }}
{{- end }}

{{/*
Refuses listener security the probes could not pass.
*/}}
{{- define "sloscope.checkListenerSecurity" -}}
{{- if and (include "sloscope.metricsTLS" .) (eq .Values.tls.clientAuthType "RequireAndVerifyClientCert") }}
{{- fail "tls.clientAuthType RequireAndVerifyClientCert with metrics in tls.listeners: the kubelet's probes present no client certificate (use VerifyClientCertIfGiven, or leave metrics out)" }}
{{- end }}
{{- if and .Values.tls.enabled (eq .Values.tls.clientAuthType "VerifyClientCertIfGiven") (has "otlp_grpc" .Values.tls.listeners) }}
{{- fail "tls.clientAuthType VerifyClientCertIfGiven cannot apply to otlp_grpc: gRPC can only require a client certificate or not ask for one" }}
{{- end }}
{{- end }}

{{/*
The runtime settings file: .Values.config with the keys the chart owns set from the chart's values.
*/}}
{{- define "sloscope.settings" -}}
{{- $owned := dict "slo_spec" "slo.yaml" "listeners" (dict "otlp_grpc_port" (int .Values.ports.otlpGrpc) "otlp_http_port" (int .Values.ports.otlpHttp) "metrics_port" (int .Values.ports.metrics)) }}
{{- if .Values.tls.enabled }}
{{- $tls := dict "cert_file" (printf "%s/tls.crt" (include "sloscope.tlsDir" .)) "key_file" (printf "%s/tls.key" (include "sloscope.tlsDir" .)) "client_auth_type" .Values.tls.clientAuthType "listeners" .Values.tls.listeners }}
{{- if ne .Values.tls.clientAuthType "NoClientCert" }}
{{- $_ := set $tls "client_ca_file" (printf "%s/%s" (include "sloscope.tlsDir" .) .Values.tls.clientCaKey) }}
{{- end }}
{{- $_ := set $owned.listeners "tls" $tls }}
{{- end }}
{{- if .Values.auth.enabled }}
{{- $_ := set $owned.listeners "auth" (dict "token_file" (printf "%s/%s" (include "sloscope.authDir" .) .Values.auth.tokenKey) "listeners" .Values.auth.listeners) }}
{{- end }}
{{- $settings := mustMergeOverwrite (deepCopy (.Values.config | default dict)) $owned }}
{{- toYaml $settings }}
{{- end }}

{{/*
The SLO spec file: sloSpec when given, else the spec the chart's dashboards and rules were generated from.
*/}}
{{- define "sloscope.sloSpec" -}}
{{- if .Values.sloSpec }}
{{- toYaml .Values.sloSpec }}
{{- else }}
{{- .Files.Get "files/slo.yaml" }}
{{- end }}
{{- end }}

{{/*
Namespaces where pools are discovered through the Kubernetes API, as JSON:
{"<namespace>": ["<InferencePool name>", ...]} (an empty list for label-selector pools).
*/}}
{{- define "sloscope.discovery" -}}
{{- $out := dict }}
{{- range $pool := (.Values.config.pools | default list) }}
{{- $k8s := dig "targets" "kubernetes" dict $pool }}
{{- if $k8s }}
{{- $names := get $out $k8s.namespace | default list }}
{{- if $k8s.inference_pool }}
{{- $names = append $names $k8s.inference_pool | uniq | sortAlpha }}
{{- end }}
{{- $_ := set $out $k8s.namespace $names }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/*
The settings' shutdown times (their defaults when unset), checked against the pod's grace period.
*/}}
{{- define "sloscope.checkGrace" -}}
{{- $shutdown := .Values.config.shutdown_grace_seconds | default 10.0 | float64 }}
{{- $final := .Values.config.final_scrape_wait_seconds | default 15.0 | float64 }}
{{- if hasKey (.Values.config | default dict) "final_scrape_wait_seconds" }}
{{- $final = .Values.config.final_scrape_wait_seconds | float64 }}
{{- end }}
{{- $needed := addf $shutdown $final 3.0 }}
{{- if lt (float64 .Values.terminationGracePeriodSeconds) $needed }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be at least shutdown_grace_seconds + final_scrape_wait_seconds + 3 = %v: the kubelet would kill sloscope before it drains and is scraped a last time" .Values.terminationGracePeriodSeconds $needed) }}
{{- end }}
{{- end }}

{{/*
"true" when a pool's EPP is scraped with the pod's ServiceAccount token: its `epp.auth` is unset (sloscope's
default in a pod, as the EPP authenticates /metrics by default) or names that token file.
*/}}
{{- define "sloscope.eppToken" -}}
{{- $token := "/var/run/secrets/kubernetes.io/serviceaccount/token" }}
{{- $uses := false }}
{{- range $pool := (.Values.config.pools | default list) }}
{{- if $pool.epp }}
{{- if or (not (hasKey $pool.epp "auth")) (kindIs "invalid" $pool.epp.auth) (eq (dig "credentials_file" "" ($pool.epp.auth | default dict)) $token) }}
{{- $uses = true }}
{{- end }}
{{- end }}
{{- end }}
{{- $uses }}
{{- end }}
