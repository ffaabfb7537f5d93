# syntax=docker/dockerfile:1
# manifest-provider: the HTTPS service for Gatekeeper and Kyverno.
#
#   docker build -t manifest-provider:0.1.0 .
#   docker run --rm -p 8443:8443 -v $PWD/tls:/tls:ro \
#     -e MANIFEST_PROVIDER_CERT=/tls/tls.crt -e MANIFEST_PROVIDER_KEY=/tls/tls.key \
#     manifest-provider:0.1.0
#
# The entry point is `manifest-provider serve` (gunicorn, gthread workers,
# TLS); settings are MANIFEST_PROVIDER_* environment variables
# (provider/config.py). It refuses to start without a certificate.

# --- build: a wheel of the package, nothing else ----------------------------------
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml setup.cfg setup.py README.md ./
COPY provider ./provider
# The shipped policies: package data of the wheel (setup.py), for `manifest-provider policy`.
COPY policies ./policies
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && pip wheel --no-cache-dir --wheel-dir /wheels /wheels/manifest_provider-*.whl

# --- run: slim Python, the wheels, an unprivileged user ----------------------------
FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels manifest-provider \
 && groupadd --system --gid 65532 provider \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin provider
# Numeric, so runAsNonRoot can check it without reading /etc/passwd.
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["manifest-provider"]
CMD ["serve"]
