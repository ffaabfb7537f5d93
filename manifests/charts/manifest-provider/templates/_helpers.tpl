{{/*
Names, labels and the values several templates share. The TLS material and the
scope are computed once per render and kept under .Values._computed, so the
Secret, the Provider and the policies see the same CA.
*/}}

{{- define "mp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Service, Deployment and their companions: the release name when it names the chart already. */}}
{{- define "mp.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "mp.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "mp.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "mp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "mp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: manifest-provider
{{- end -}}

{{/* Selector labels of one component (verifier or observer): the pods of no other release match. */}}
{{- define "mp.selector" -}}
app.kubernetes.io/name: {{ include "mp.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "mp.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "mp.tlsSecretName" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{- .Values.tls.secretName -}}
{{- else -}}
{{- printf "%s-tls" (include "mp.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* The host the engines call, which the serving certificate names. */}}
{{- define "mp.host" -}}
{{- printf "%s.%s.svc" (include "mp.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "mp.url" -}}
{{- printf "https://%s:%v/v1/%s/verify" (include "mp.host" .root) .root.Values.service.port .route -}}
{{- end -}}

{{/*
The TLS material, computed once: {ca, cert, key} as PEM. ca is empty when the chart
cannot know it (a cert-manager issuer or an existing Secret, without tls.caBundle and
before the Secret exists); "mp.ca" then refuses to render what needs it.

generate: a CA and a serving certificate made here (ECDSA P-256, as the base's
cert-manager Certificate), kept across upgrades: when the Secret exists already
(lookup; empty under `helm template`), its files are reused, so an upgrade rotates
nothing that the engines' caBundle pins.
*/}}
{{- define "mp.tls" -}}
{{- if not (hasKey .Values "_computed") -}}
{{- $_ := set .Values "_computed" dict -}}
{{- end -}}
{{- if not (hasKey .Values._computed "tls") -}}
{{- $secretName := include "mp.tlsSecretName" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $secretName -}}
{{- $data := dig "data" dict $existing -}}
{{- $tls := dict "ca" "" "cert" "" "key" "" -}}
{{- if and (eq .Values.tls.mode "generate") (hasKey $data "tls.crt") (hasKey $data "tls.key") (hasKey $data "ca.crt") -}}
{{- $tls = dict "ca" (index $data "ca.crt" | b64dec) "cert" (index $data "tls.crt" | b64dec) "key" (index $data "tls.key" | b64dec) -}}
{{- else if eq .Values.tls.mode "generate" -}}
{{- $fullname := include "mp.fullname" . -}}
{{- $caKey := genPrivateKey "ecdsa" -}}
{{- $ca := genCAWithKey (printf "%s CA" $fullname) (int .Values.tls.generate.caValidityDays) $caKey -}}
{{- $host := include "mp.host" . -}}
{{- $names := list $host (printf "%s.cluster.local" $host) -}}
{{- $certKey := genPrivateKey "ecdsa" -}}
{{- $cert := genSignedCertWithKey $host nil $names (int .Values.tls.generate.certValidityDays) $ca $certKey -}}
{{- $tls = dict "ca" $ca.Cert "cert" $cert.Cert "key" $cert.Key -}}
{{- end -}}
{{- if .Values.tls.caBundle -}}
{{- $_ := set $tls "ca" .Values.tls.caBundle -}}
{{- else if and (not $tls.ca) (hasKey $data "ca.crt") -}}
{{- $_ := set $tls "ca" (index $data "ca.crt" | b64dec) -}}
{{- end -}}
{{- $_ := set .Values._computed "tls" $tls -}}
{{- end -}}
{{- end -}}

{{/*
The CA the engines trust, PEM with exactly one final newline (as `manifest-provider policy`
normalises it); fails the render when it is unknown and .what needs it.
*/}}
{{- define "mp.ca" -}}
{{- include "mp.tls" .root -}}
{{- $ca := .root.Values._computed.tls.ca -}}
{{- if not $ca -}}
{{- fail (printf "%s needs the CA that signed the service's certificate, which this render cannot know (tls.mode=%s): set tls.caBundle to that CA (PEM), or install once without it, wait for the Secret %s to hold ca.crt, and upgrade" .what .root.Values.tls.mode (include "mp.tlsSecretName" .root)) -}}
{{- end -}}
{{- printf "%s\n" (trim $ca) -}}
{{- end -}}

{{/*
The scope: policies.kinds resolved through files/kinds.yaml (generated from the tables
`manifest-provider policy` uses, tools/make_chart.py), each kind once, in the order given.
Returns YAML: {refs: [...], namespaces: [...], everywhere: bool}.
*/}}
{{- define "mp.scope" -}}
{{- $table := .Files.Get "files/kinds.yaml" | fromYaml -}}
{{- $refs := list -}}
{{- $seen := dict -}}
{{- range .Values.policies.kinds -}}
{{- $ref := index $table . -}}
{{- if not $ref -}}
{{- fail (printf "policies.kinds: %s is not a built-in kind" .) -}}
{{- end -}}
{{- $key := printf "%s/%s" $ref.group $ref.kind -}}
{{- if not (hasKey $seen $key) -}}
{{- $_ := set $seen $key true -}}
{{- $refs = append $refs $ref -}}
{{- end -}}
{{- end -}}
{{- $everywhere := has "*" .Values.policies.namespaces -}}
{{- dict "refs" $refs "namespaces" (ternary list .Values.policies.namespaces $everywhere) "everywhere" $everywhere | toYaml -}}
{{- end -}}

{{/* Whether the service needs a Kubernetes API token: TokenReview (kyverno), watching its policies (webhook), server-side dry-run, or Secrets to read. */}}
{{- define "mp.needsToken" -}}
{{- if or (eq .Values.engine "kyverno") (eq .Values.engine "webhook") (dig "dryRun" "enabled" false .Values.policy) .Values.secrets.keys .Values.secrets.pullSecrets -}}true{{- end -}}
{{- end -}}

{{/*
A value as a CEL expression that evaluates to it: the chart's twin of cel_literal in
provider/cli/_generate.py. Every list item and map value is wrapped in dyn() (CEL list
and map literals must otherwise hold one type); strings are Go's ASCII-only quoting
(%+q), whose escapes (\n, \", \\, \uXXXX, \UXXXXXXXX, \a \b \f \r \t \v, \xHH below
0x20) are CEL's too (cel-spec langdef.md, "String and Bytes Values"). Map keys come out
sorted; tests/manifests/test_chart_policies.py evaluates both and compares.
*/}}
{{- define "mp.cel" -}}
{{- $v := .value -}}
{{- $indent := int .indent -}}
{{- $pad := repeat (mul 2 $indent | int) " " -}}
{{- $inner := repeat (mul 2 (add1 $indent) | int) " " -}}
{{- $kind := kindOf $v -}}
{{- if eq $kind "invalid" -}}null
{{- else if eq $kind "bool" -}}{{ ternary "true" "false" $v }}
{{- else if eq $kind "string" -}}{{ printf "%+q" $v }}
{{- else if or (eq $kind "int") (eq $kind "int64") (eq $kind "float64") -}}
{{- if ne (float64 $v) (floor $v) -}}
{{- fail (printf "policy: %v is not a whole number (the policy's numbers are counts)" $v) -}}
{{- end -}}
{{- printf "%d" (int64 $v) -}}
{{- else if eq $kind "slice" -}}
{{- if not $v -}}[]{{- else -}}
[
{{ range $i, $item := $v }}{{ if $i }},
{{ end }}{{ $inner }}dyn({{ include "mp.cel" (dict "value" $item "indent" (add1 $indent)) }}){{ end }}
{{ $pad }}]
{{- end -}}
{{- else if eq $kind "map" -}}
{{- if not $v -}}{}{{- else -}}
{
{{ range $i, $key := keys $v | sortAlpha }}{{ if $i }},
{{ end }}{{ $inner }}{{ printf "%+q" $key }}: dyn({{ include "mp.cel" (dict "value" (index $v $key) "indent" (add1 $indent)) }}){{ end }}
{{ $pad }}}
{{- end -}}
{{- else -}}
{{- fail (printf "policy: a %s has no CEL literal" $kind) -}}
{{- end -}}
{{- end -}}
