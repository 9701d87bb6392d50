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
{{- if .Values.extender.tls.enabled }}https{{ else }}http{{ end -}}
{{- end -}}

{{/* The extender's in-cluster host:port, as schedulers call it. */}}
{{- define "toposched.extenderAuthority" -}}
{{ include "toposched.extenderName" . }}.{{ .Release.Namespace }}.svc:{{ .Values.extender.service.port }}
{{- end -}}

{{- define "toposched.tlsSecret" -}}
{{- required "extender.tls.secretName is required when extender.tls.enabled is true" .Values.extender.tls.secretName -}}
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
  # Prioritize scores are 0-10; kube-scheduler multiplies them by weight x 10 and adds them to
  # the in-tree scores (each 0-100).
  weight: {{ .Values.kubeScheduler.weight | int }}
  enableHTTPS: {{ .Values.extender.tls.enabled }}
  {{- if .Values.extender.tls.enabled }}
  tlsConfig:
    {{- if .Values.extender.tls.insecureSkipVerify }}
    insecure: true
    {{- else }}
    serverName: {{ include "toposched.extenderName" . }}.{{ .Release.Namespace }}.svc
    caFile: /etc/toposched/tls/ca.crt
    {{- end }}
    {{- if .Values.extender.tls.clientAuth }}
    # The client certificate the extender requires (mutual TLS, extender.tls.clientAuth).
    certFile: /etc/toposched/tls-client/tls.crt
    keyFile: /etc/toposched/tls-client/tls.key
    {{- end }}
  {{- end }}
  # Names only, never the full Node objects: 5,000 nodes are 87 KB instead of 90 MB.
  nodeCacheCapable: true
  httpTimeout: {{ .Values.kubeScheduler.httpTimeout }}
  ignorable: false
  # Only pods that ask for these resources reach the extender. Resources no node advertises
  # (HAMi's per-vGPU memory and cores) must be ignoredByScheduler, or NodeResourcesFit
  # rejects every node.
  managedResources:
  {{- range .Values.managedResources }}
    - name: {{ .name }}
      ignoredByScheduler: {{ .ignoredByScheduler | default false }}
  {{- end }}
{{- end -}}
