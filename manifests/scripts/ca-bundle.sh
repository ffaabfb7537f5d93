#!/bin/sh
# Print the CA that signed manifest-provider's serving certificate, or put it
# where the policy engines read it.
#
#   ca-bundle.sh [--namespace NS] [--pem | --base64]
#   ca-bundle.sh [--namespace NS] --provider         # print the Gatekeeper Provider, caBundle filled
#   ca-bundle.sh [--namespace NS] --apply-provider   # ... and kubectl apply it (create, or update on CA renewal)
#   ca-bundle.sh [--namespace NS] --patch-kyverno    # the Kyverno ClusterPolicy's apiCall caBundle
#   ca-bundle.sh [--namespace NS] --kyverno-trust [--kyverno-namespace NS]
#                                  # ConfigMap manifest-provider-ca (ca.crt) in Kyverno's namespace, for
#                                  # Kyverno's trust store (the CEL ValidatingPolicy; docs/quickstart-kyverno.md)
#
# The CA is ca.crt of Secret manifest-provider-tls, written by cert-manager
# (manifests/base/certificate.yaml): wait for the Certificate to be Ready first.
# The Provider is manifests/overlays/gatekeeper/provider.yaml (--provider-file
# FILE for another) with spec.caBundle added. Needs kubectl, base64, sed, awk.
set -eu

namespace=manifest-provider
kyverno_namespace=kyverno
mode=pem
provider_file=$(dirname "$0")/../overlays/gatekeeper/provider.yaml
while [ $# -gt 0 ]; do
  case "$1" in
    --namespace|-n) namespace=$2; shift 2 ;;
    --provider-file) provider_file=$2; shift 2 ;;
    --kyverno-namespace) kyverno_namespace=$2; shift 2 ;;
    --pem|--base64|--provider|--apply-provider|--patch-kyverno|--kyverno-trust) mode=${1#--}; shift ;;
    # The Provider used to be shipped with a placeholder and patched; it is now created here.
    --patch-provider) mode=apply-provider; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "ca-bundle.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

b64=$(kubectl -n "$namespace" get secret manifest-provider-tls -o jsonpath='{.data.ca\.crt}')
if [ -z "$b64" ]; then
  echo "ca-bundle.sh: Secret $namespace/manifest-provider-tls has no ca.crt yet: is cert-manager running? (kubectl -n $namespace wait --for=condition=Ready certificate/manifest-provider-tls)" >&2
  exit 1
fi
pem=$(printf '%s' "$b64" | base64 -d)
case "$pem" in
  "-----BEGIN CERTIFICATE-----"*) ;;
  *) echo "ca-bundle.sh: ca.crt of Secret $namespace/manifest-provider-tls is not a PEM certificate" >&2; exit 1 ;;
esac
# The PEM on one line with \n escapes: a JSON string.
escaped=$(printf '%s\n' "$pem" | sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/\\n/g')

# The Provider file with caBundle as the first field of spec. Gatekeeper wants the
# base64 of the PEM (StdEncoding, one line): ca.crt as the Secret stores it.
provider() {
  if ! grep -q '^spec:[[:space:]]*$' "$provider_file"; then
    echo "ca-bundle.sh: $provider_file has no top-level spec:" >&2
    exit 1
  fi
  awk -v bundle="$b64" '{ print } /^spec:[[:space:]]*$/ { print "  caBundle: " bundle }' "$provider_file"
}

# The CA as a ConfigMap in Kyverno's namespace: mounted into Kyverno's admission controller and
# named in SSL_CERT_DIR, Go's TLS stack trusts it beside the system roots.
trust_configmap() {
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: manifest-provider-ca\n  namespace: %s\n' "$kyverno_namespace"
  printf '  labels:\n    app.kubernetes.io/name: manifest-provider\ndata:\n  ca.crt: |\n'
  printf '%s\n' "$pem" | sed 's/^/    /'
}

case "$mode" in
  pem) printf '%s\n' "$pem" ;;
  base64) printf '%s\n' "$b64" ;;
  provider) provider ;;
  apply-provider)
    manifest=$(provider)
    printf '%s\n' "$manifest" | kubectl apply -f - ;;
  patch-kyverno)
    kubectl patch clusterpolicy verify-manifest-signature --type json \
      -p "[{\"op\":\"replace\",\"path\":\"/spec/rules/0/context/0/apiCall/service/caBundle\",\"value\":\"$escaped\"}]" ;;
  kyverno-trust)
    manifest=$(trust_configmap)
    printf '%s\n' "$manifest" | kubectl apply -f - ;;
esac
