#!/bin/sh
# Print the CA that signed manifest-provider's serving certificate, or put it
# where the policy engines read it.
#
#   ca-bundle.sh [--namespace NS] [--pem | --base64 | --cel]
#   ca-bundle.sh [--namespace NS] --patch-provider   # Gatekeeper Provider caBundle
#   ca-bundle.sh [--namespace NS] --patch-kyverno    # both Kyverno policies
#
# The CA is ca.crt of Secret manifest-provider-tls, written by cert-manager
# (manifests/base/certificate.yaml). Needs kubectl, base64 and sed.
set -eu

namespace=manifest-provider
mode=pem
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace|-n) namespace=$2; shift 2 ;;
    --pem|--base64|--cel|--patch-provider|--patch-kyverno) mode=${1#--}; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "ca-bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

b64=$(kubectl -n "$namespace" get secret manifest-provider-tls -o jsonpath='{.data.ca\.crt}')
if [ -z "$b64" ]; then
  echo "ca-bundle.sh: Secret $namespace/manifest-provider-tls has no ca.crt yet (is cert-manager running?)" >&2
  exit 1
fi
pem=$(printf '%s' "$b64" | base64 -d)
# The PEM on one line with \n escapes: a CEL string literal, or a JSON string.
escaped=$(printf '%s\n' "$pem" | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/\\n/g')
# The same inside a JSON string: the backslashes themselves escaped.
escaped_json=$(printf '%s\n' "$pem" | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/\\\\n/g')

case "$mode" in
  pem) printf '%s\n' "$pem" ;;
  base64) printf '%s\n' "$b64" ;;
  cel) printf "'%s\\\\n'\n" "$escaped" ;;
  patch-provider)
    kubectl patch providers.externaldata.gatekeeper.sh manifest-provider --type merge \
      -p "{\"spec\":{\"caBundle\":\"$b64\"}}" ;;
  patch-kyverno)
    kubectl patch clusterpolicy verify-manifest-signature --type json \
      -p "[{\"op\":\"replace\",\"path\":\"/spec/rules/0/context/0/apiCall/service/caBundle\",\"value\":\"$escaped\"}]"
    if kubectl get validatingpolicies.policies.kyverno.io verify-manifest-signature-cel >/dev/null 2>&1; then
      # variables[1] is serviceCA; its expression is a CEL string literal.
      kubectl patch validatingpolicies.policies.kyverno.io verify-manifest-signature-cel --type json \
        -p "[{\"op\":\"replace\",\"path\":\"/spec/variables/1/expression\",\"value\":\"'$escaped_json\\\\n'\"}]"
    fi ;;
esac
