# manifest-provider: the HTTPS service for Gatekeeper and Kyverno.
#
#   docker build -t manifest-provider:0.1.0 .
#   docker run --rm --read-only --tmpfs /tmp -p 8443:8443 -p 8888:8888 \
#     -v "$PWD/tls:/tls:ro" \
#     -e MANIFEST_PROVIDER_CERT=/tls/tls.crt -e MANIFEST_PROVIDER_KEY=/tls/tls.key \
#     -e MANIFEST_PROVIDER_CLIENT_CA=/tls/client-ca.crt \
#     -e MANIFEST_PROVIDER_CALLERS=cert:gatekeeper-webhook-service.gatekeeper-system.svc \
#     manifest-provider:0.1.0
#
# tls/ holds the server's certificate and key and the CA that issued the callers' client
# certificates (for Gatekeeper: ca.crt of its Secret gatekeeper-webhook-server-cert), readable
# by uid 65532. Only a caller with a certificate from that CA, named in
# MANIFEST_PROVIDER_CALLERS, gets an answer (docs/operations.md, Callers); Kyverno's bearer
# tokens need MANIFEST_PROVIDER_TOKEN_AUDIENCE and a cluster instead. Port 8443 is the API
# (TLS), 8888 plain-HTTP GET /metrics without credentials (MANIFEST_PROVIDER_METRICS_PORT).
#
# The entry point is `manifest-provider serve` (gunicorn, gthread workers, TLS); settings are
# MANIFEST_PROVIDER_* environment variables (provider/service/config.py). It refuses to start
# without a certificate. Building with Docker, Podman or buildah: docs/image.md.
#
# Plain Dockerfile syntax: no syntax directive (a BuildKit frontend fetched from Docker Hub) and
# no RUN --mount, so the classic builder, BuildKit, Podman and buildah build it with nothing
# but the base image and a package index. Every package comes from requirements/ with
# --require-hashes: the image holds the versions the tests passed with, byte for byte.

# The base image; a mirror or a digest-pinned reference for reproducible or air-gapped builds.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- build: a wheel of the package, with the locked build backend -----------------------
FROM ${PYTHON_IMAGE} AS build
# A mirror of the package index (e.g. --build-arg PIP_INDEX_URL=https://pypi.internal/simple);
# the hashes in requirements/ make any mirror safe to use.
ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY requirements/build.txt requirements/build.txt
RUN pip install --require-hashes --only-binary=:all: -r requirements/build.txt
COPY pyproject.toml setup.cfg setup.py README.md LICENSE ./
COPY provider ./provider
# The shipped policies: package data of the wheel (setup.py), for `manifest-provider policy`.
COPY policies ./policies
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# --- run: slim Python, the locked runtime set, the package, an unprivileged user ---------
FROM ${PYTHON_IMAGE}
ARG PIP_INDEX_URL=https://pypi.org/simple
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY requirements/serve.txt /tmp/serve.txt
RUN pip install --require-hashes --only-binary=:all: -r /tmp/serve.txt \
 && rm /tmp/serve.txt
COPY --from=build /wheels /wheels
# --no-deps: everything it needs came from serve.txt above; pip check proves nothing is missing.
RUN pip install --no-deps --no-index /wheels/manifest_provider-*.whl \
 && rm -rf /wheels \
 && pip check \
 && groupadd --system --gid 65532 provider \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin provider
# Numeric, so runAsNonRoot can check it without reading /etc/passwd.
USER 65532:65532
# The API (TLS) and the metrics port (plain HTTP): `serve`'s defaults.
EXPOSE 8443 8888
ENTRYPOINT ["manifest-provider"]
CMD ["serve"]
