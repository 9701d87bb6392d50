{{/* Names, labels and shared fragments of the toposched chart. */}}

{{- define "toposched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object name: the release name when it already contains the chart name. */}}
{{- define "toposched.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "toposched.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "toposched.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "toposched.agentName" -}}{{ include "toposched.fullname" . }}-agent{{- end -}}
{{- define "toposched.extenderName" -}}{{ include "toposched.fullname" . }}-extender{{- end -}}
{{- define "toposched.schedulerName" -}}{{ include "toposched.fullname" . }}-scheduler{{- end -}}

{{- define "toposched.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The extender's image (values extenderImage): toposched-extender, no hwloc. */}}
{{- define "toposched.extenderImage" -}}
{{- $e := .Values.extenderImage | default dict -}}
{{- printf "%s:%s" (default .Values.image.repository $e.repository) (default (default .Chart.AppVersion .Values.image.tag) $e.tag) -}}
{{- end -}}

{{/*
Selector labels of one component: (dict "ctx" $ "component" "agent"). app.kubernetes.io/name is
"<chart>-<component>" (toposched-agent, toposched-extender, toposched-scheduler), what
`kubectl -l` in the docs uses; instance keeps two releases apart. Selectors are immutable: never
add to these.
*/}}
{{- define "toposched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toposched.name" .ctx }}-{{ .component }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}

{{/* Every object's labels; (dict "ctx" $ "component" "agent"), component "" for shared objects. */}}
{{- define "toposched.labels" -}}
{{- if .component -}}
{{ include "toposched.selectorLabels" . }}
app.kubernetes.io/component: {{ .component }}
{{- else -}}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end }}
app.kubernetes.io/part-of: toposched
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
helm.sh/chart: {{ include "toposched.chart" .ctx }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The container securityContext every toposched container runs with. */}}
{{- define "toposched.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "toposched.scheme" -}}
{{- if include "toposched.tlsEnabled" . }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The extender's in-cluster host:port, as schedulers call it. */}}
{{- define "toposched.extenderAuthority" -}}
{{ include "toposched.extenderName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.extender.service.port }}
{{- end -}}

{{/*
TLS between the scheduler and the extender (values.yaml `extender.tls`; docs/install.md, "TLS
between scheduler and extender"). Each helper prints "true" or nothing, for `if include ...`;
templates ask these, never the raw values, because "auto" is a non-empty string.
*/}}

{{/* HTTPS: extender.tls.enabled true, or auto in schedulerMode secondary, where the chart runs
both ends. In volcano and none the scheduler is configured outside the chart, so auto is off. */}}
{{- define "toposched.tlsEnabled" -}}
{{- $v := toString .Values.extender.tls.enabled -}}
{{- if eq $v "auto" -}}
{{- if eq .Values.schedulerMode "secondary" }}true{{ end -}}
{{- else if eq $v "true" -}}
true
{{- else if ne $v "false" -}}
{{- fail (printf "extender.tls.enabled must be auto, true or false, not %q" $v) -}}
{{- end -}}
{{- end -}}

{{/* The chart makes the certificates: TLS on and no extender.tls.secretName. */}}
{{- define "toposched.tlsGenerated" -}}
{{- if and (include "toposched.tlsEnabled" .) (not .Values.extender.tls.secretName) -}}
{{- if eq .Values.schedulerMode "volcano" -}}
{{- fail "extender.tls.enabled with schedulerMode volcano needs extender.tls.secretName: Volcano's extender client trusts only the system store of its image, never a CA the chart generates" -}}
{{- end -}}
{{- if .Values.extender.tls.clientSecretName -}}
{{- fail "extender.tls.clientSecretName needs extender.tls.secretName: the client certificate must be signed by the CA in that Secret's ca.crt (leave both empty and the chart generates both)" -}}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* Mutual TLS (--tls-client-ca): clientAuth true, or auto when the chart makes the certificates
(it then makes the client certificate too). A Secret you name keeps the old default, off, until
you set clientAuth true with clientSecretName. Never with Volcano: its client sends no
certificate. */}}
{{- define "toposched.clientAuth" -}}
{{- if include "toposched.tlsEnabled" . -}}
{{- $v := toString .Values.extender.tls.clientAuth -}}
{{- if eq $v "auto" -}}
{{- if and (ne .Values.schedulerMode "volcano") (include "toposched.tlsGenerated" .) }}true{{ end -}}
{{- else if eq $v "true" -}}
{{- if eq .Values.schedulerMode "volcano" -}}
{{- fail "extender.tls.clientAuth cannot be used with schedulerMode volcano: Volcano's extender client sends no client certificate" -}}
{{- end -}}
true
{{- else if ne $v "false" -}}
{{- fail (printf "extender.tls.clientAuth must be auto, true or false, not %q" $v) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The server Secret (tls.crt, tls.key, ca.crt): the extender serves with it, its ca.crt verifies
the extender for the scheduler and the scheduler for the extender (--tls-client-ca). */}}
{{- define "toposched.tlsSecret" -}}
{{- if include "toposched.tlsGenerated" . -}}
{{ include "toposched.extenderName" . }}-tls
{{- else -}}
{{ .Values.extender.tls.secretName }}
{{- end -}}
{{- end -}}

{{/* The client Secret (tls.crt, tls.key) the scheduler presents with mutual TLS. */}}
{{- define "toposched.clientTlsSecret" -}}
{{- if include "toposched.tlsGenerated" . -}}
{{ include "toposched.schedulerName" . }}-client-tls
{{- else -}}
{{- required "extender.tls.clientSecretName is required with extender.tls.clientAuth in secondary mode" .Values.extender.tls.clientSecretName -}}
{{- end -}}
{{- end -}}

{{/*
The certificates the chart generates, made once per render and kept in the root context (the
templates of one render share it), so that the Secrets and the checksum that restarts the
scheduler agree. Afterwards `.toposchedGeneratedTls` holds ca, serverCrt, serverKey, clientCrt and
clientKey (PEM; client only with mutual TLS), notAfter, renewAfter (RFC 3339) and reused.

On install and upgrade the Secrets already in the cluster are reused (lookup) while they are
complete, hold one CA, and the time in their toposched.io/tls-renew-after annotation (two thirds
into the validity, cert-manager's default renewBefore) has not come; otherwise a new CA and new
certificates are made, all together: the CA's key is never stored, so no certificate can be
renewed alone. `helm template` and `--dry-run=client` have no cluster: lookup finds nothing and
each render makes new ones (GitOps users name their own Secrets; docs/install.md).

What the functions make (github.com/Masterminds/sprig/v3 v3.3.0, helm v4.3.2's, crypto.go):
genCA and genSignedCert make 2048-bit RSA keys; getBaseCertTemplate gives every certificate
ExtKeyUsage serverAuth and clientAuth, KeyUsage digitalSignature|keyEncipherment and NotBefore
= now (no backdating: a node whose clock is behind helm's sees them as not yet valid), so one
genSignedCert serves for the server and for the client certificate.
*/}}
{{- define "toposched.generatedTls" -}}
{{- if not (hasKey . "toposchedGeneratedTls") -}}
{{- $ns := .Release.Namespace -}}
{{- $ext := include "toposched.extenderName" . -}}
{{- $withClient := include "toposched.clientAuth" . -}}
{{- /* dig: a release upgraded with --reuse-values keeps the old chart's defaults, without the key. */ -}}
{{- $days := int (dig "generatedValidityDays" 3650 .Values.extender.tls) -}}
{{- if lt $days 1 -}}
{{- fail "extender.tls.generatedValidityDays must be at least 1" -}}
{{- end -}}
{{- $server := lookup "v1" "Secret" $ns (include "toposched.tlsSecret" .) | default dict -}}
{{- $client := dict -}}
{{- if $withClient -}}
{{- $client = lookup "v1" "Secret" $ns (include "toposched.clientTlsSecret" .) | default dict -}}
{{- end -}}
{{- $sd := get $server "data" | default dict -}}
{{- $cd := get $client "data" | default dict -}}
{{- $renewAfter := dig "metadata" "annotations" "toposched.io/tls-renew-after" "" $server -}}
{{- $reuse := and (get $sd "tls.crt") (get $sd "tls.key") (get $sd "ca.crt") $renewAfter -}}
{{- if $reuse -}}
{{- $reuse = lt (now).Unix (toDate "2006-01-02T15:04:05Z07:00" $renewAfter).Unix -}}
{{- end -}}
{{- if and $reuse $withClient -}}
{{- $reuse = and (get $cd "tls.crt") (get $cd "tls.key") (eq (get $cd "ca.crt") (get $sd "ca.crt")) -}}
{{- end -}}
{{- $tls := dict "reused" (not (not $reuse)) -}}
{{- if $reuse -}}
{{- $_ := set $tls "ca" (get $sd "ca.crt" | b64dec) -}}
{{- $_ := set $tls "serverCrt" (get $sd "tls.crt" | b64dec) -}}
{{- $_ := set $tls "serverKey" (get $sd "tls.key" | b64dec) -}}
{{- $_ := set $tls "notAfter" (dig "metadata" "annotations" "toposched.io/tls-not-after" "" $server) -}}
{{- $_ := set $tls "renewAfter" $renewAfter -}}
{{- if $withClient -}}
{{- $_ := set $tls "clientCrt" (get $cd "tls.crt" | b64dec) -}}
{{- $_ := set $tls "clientKey" (get $cd "tls.key" | b64dec) -}}
{{- end -}}
{{- else -}}
{{- $ca := genCA (printf "%s-ca" (include "toposched.fullname" .)) $days -}}
{{- $host := printf "%s.%s.svc" $ext $ns -}}
{{- $serving := genSignedCert $host nil (list $host $ext (printf "%s.%s" $ext $ns) (printf "%s.cluster.local" $host)) $days $ca -}}
{{- $_ := set $tls "ca" $ca.Cert -}}
{{- $_ := set $tls "serverCrt" $serving.Cert -}}
{{- $_ := set $tls "serverKey" $serving.Key -}}
{{- $now := now -}}
{{- $_ := set $tls "notAfter" (dateInZone "2006-01-02T15:04:05Z07:00" (dateModify (printf "+%dh" (mul $days 24)) $now) "UTC") -}}
{{- $_ := set $tls "renewAfter" (dateInZone "2006-01-02T15:04:05Z07:00" (dateModify (printf "+%dh" (mul $days 16)) $now) "UTC") -}}
{{- if $withClient -}}
{{- $presenting := genSignedCert (include "toposched.schedulerName" .) nil nil $days $ca -}}
{{- $_ := set $tls "clientCrt" $presenting.Cert -}}
{{- $_ := set $tls "clientKey" $presenting.Key -}}
{{- end -}}
{{- end -}}
{{- $_ := set . "toposchedGeneratedTls" $tls -}}
{{- end -}}
{{- end -}}

{{- define "toposched.checkMode" -}}
{{- if not (has .Values.schedulerMode (list "secondary" "volcano" "none")) -}}
{{- fail (printf "schedulerMode must be secondary, volcano or none, not %q" .Values.schedulerMode) -}}
{{- end -}}
{{- end -}}

{{/*
The KubeSchedulerConfiguration `extenders` entry (schedulerMode secondary, and NOTES.txt for
none). Field reference: kubernetes/kube-scheduler config/v1 types.go (Extender). In secondary mode
the CA comes from the TLS Secret mounted at /etc/toposched/tls; for none, NOTES.txt asks for caData.
*/}}
{{- define "toposched.kubeExtender" -}}
- urlPrefix: "{{ include "toposched.scheme" . }}://{{ include "toposched.extenderAuthority" . }}/scheduler"
  filterVerb: filter
  prioritizeVerb: prioritize
  preemptVerb: preempt
  # toposched records the chosen devices and creates the Binding itself. Only one extender
  # may bind, and a binding extender must not be ignorable: an ignored bind error would let
  # the default binder bind the pod without its device allocation.
  bindVerb: bind
  {{- include "toposched.kubeExtenderConnection" . }}
  ignorable: false
  # Only pods that ask for these resources reach the extender. Resources no node advertises
  # (HAMi's per-vGPU memory and cores) must be ignoredByScheduler, or NodeResourcesFit
  # rejects every node.
  managedResources:
  {{- range .Values.managedResources }}
    - name: {{ .name }}
      ignoredByScheduler: {{ .ignoredByScheduler | default false }}
  {{- end }}
{{- if .Values.kubeScheduler.scoreCpuPods }}
# Pods that ask no device (kubeScheduler.scoreCpuPods): without managedResources every pod
# reaches this entry; prioritize-cpu scores the nodes where a pod's CPU strands the fewest GPUs
# (FGD's rule for CPU-only tasks) and names no node for a pod that asks devices (the entry above
# scores those). No filter, no bind: kube-scheduler binds these pods itself, and a failed call
# only drops this entry's scores.
- urlPrefix: "{{ include "toposched.scheme" . }}://{{ include "toposched.extenderAuthority" . }}/scheduler"
  prioritizeVerb: prioritize-cpu
  {{- include "toposched.kubeExtenderConnection" . }}
  ignorable: true
{{- end }}
{{- end -}}

{{/*
What both `extenders` entries share: the weight, TLS, names-only node lists and the timeout.
*/}}
{{- define "toposched.kubeExtenderConnection" }}
  # Prioritize scores are 0-10; kube-scheduler multiplies them by weight x 10 and adds them to
  # the in-tree scores (each 0-100).
  weight: {{ .Values.kubeScheduler.weight | int }}
  enableHTTPS: {{ include "toposched.tlsEnabled" . | eq "true" }}
  {{- if include "toposched.tlsEnabled" . }}
  tlsConfig:
    {{- if .Values.extender.tls.insecureSkipVerify }}
    insecure: true
    {{- else }}
    serverName: {{ include "toposched.extenderName" . }}.{{ .Release.Namespace }}.svc
    caFile: /etc/toposched/tls/ca.crt
    {{- end }}
    {{- if include "toposched.clientAuth" . }}
    # The client certificate the extender requires (mutual TLS, extender.tls.clientAuth).
    certFile: /etc/toposched/tls-client/tls.crt
    keyFile: /etc/toposched/tls-client/tls.key
    {{- end }}
  {{- end }}
  # Names only, never the full Node objects: 5,000 nodes are 87 KB instead of 90 MB.
  nodeCacheCapable: true
  httpTimeout: {{ .Values.kubeScheduler.httpTimeout }}
{{- end -}}
