"""The service's configuration: MANIFEST_PROVIDER_* variables, overrides, defaults, and the JSON log format."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from provider.errors import ConfigError
from provider.limits import DEFAULT_LIMITS
from provider.service.config import Config, JsonFormatter, env_name, load_config


def test_defaults_are_documented_values() -> None:
    config = load_config({}, {})
    assert config.deadline_seconds == 1.5
    assert config.max_body_bytes == DEFAULT_LIMITS.max_body_bytes == 16 * 1024 * 1024
    assert config.max_keys == DEFAULT_LIMITS.max_keys_per_request
    assert (config.port, config.bind, config.unsafe_http, config.cert, config.client_ca) == (
        8443,
        "0.0.0.0",
        False,
        None,
        None,
    )
    assert config.workers >= 1 and config.dry_runner is None


def test_environment_variables_are_parsed_by_type() -> None:
    environ = {
        "MANIFEST_PROVIDER_DEADLINE_SECONDS": "1.25",
        "MANIFEST_PROVIDER_MAX_KEYS": " 7 ",
        "MANIFEST_PROVIDER_UNSAFE_HTTP": "yes",
        "MANIFEST_PROVIDER_KUBECONFIG": "/k",
        "MANIFEST_PROVIDER_CLIENT_CA": "",
        "MANIFEST_PROVIDER_PASSWORD": "not a setting of the service",
    }
    config = load_config({}, environ)
    assert (config.deadline_seconds, config.max_keys, config.unsafe_http, config.kubeconfig, config.client_ca) == (
        1.25,
        7,
        True,
        "/k",
        None,
    )


def test_overrides_win_over_the_environment_and_none_means_not_given() -> None:
    environ = {"MANIFEST_PROVIDER_PORT": "9000", "MANIFEST_PROVIDER_WORKERS": "3"}
    config = load_config({"PORT": 9443, "WORKERS": None}, environ)
    assert (config.port, config.workers) == (9443, 3)


def test_objects_come_from_overrides_only() -> None:
    runner = object()
    config = load_config({"DRY_RUNNER": runner}, {"MANIFEST_PROVIDER_DRY_RUNNER": "ignored"})
    assert config.dry_runner is runner


def test_effective_limits_carry_the_service_limits() -> None:
    limits = load_config({"MAX_BODY_BYTES": 100, "MAX_KEYS": 3}, {}).effective_limits
    assert (limits.max_body_bytes, limits.max_keys_per_request, limits.max_nodes) == (100, 3, DEFAULT_LIMITS.max_nodes)


@pytest.mark.parametrize(
    ("overrides", "environ", "message"),
    [
        ({}, {"MANIFEST_PROVIDER_DEADLINE_SECONDS": "soon"}, "DEADLINE_SECONDS: expected a number"),
        ({}, {"MANIFEST_PROVIDER_PORT": "8443.5"}, "PORT: expected a whole number"),
        ({}, {"MANIFEST_PROVIDER_UNSAFE_HTTP": "maybe"}, "UNSAFE_HTTP: expected true or false"),
        ({"DEADLINE_SECONDS": 0}, {}, "DEADLINE_SECONDS: must be greater than 0"),
        ({"WORKERS": -1}, {}, "WORKERS: must be greater than 0"),
        ({"CACHE_ENTRIES": -1}, {}, "CACHE_ENTRIES: must be 0"),
        ({"PORT": 70000}, {}, "70000 is not a TCP port"),
        ({"LOG_LEVEL": "loud"}, {}, "'loud' is not one of"),
        ({"PORT": True}, {}, "PORT: expected int, got bool"),
        ({"DEADLINE_SECONDS": "1"}, {}, None),
        ({"THREADS": [4]}, {}, "THREADS: expected int, got list"),
        ({"TIMEOUT": 3}, {}, "unknown setting 'TIMEOUT'"),
    ],
    ids=[
        "not-a-number",
        "not-whole",
        "not-a-bool",
        "zero-deadline",
        "negative-workers",
        "negative-cache",
        "port-range",
        "log-level",
        "bool-for-int",
        "string-override-parses",
        "list-for-int",
        "unknown-setting",
    ],
)
def test_bad_settings_are_config_errors(
    overrides: dict[str, Any], environ: dict[str, str], message: str | None
) -> None:
    if message is None:
        assert load_config(overrides, environ).deadline_seconds == 1.0
        return
    with pytest.raises(ConfigError, match=message):
        load_config(overrides, environ)


def test_every_setting_has_an_environment_name() -> None:
    assert env_name("max_body_bytes") == "MANIFEST_PROVIDER_MAX_BODY_BYTES"
    assert Config().token_audience is None


def test_json_formatter_writes_one_object_with_extra_fields_and_no_traceback() -> None:
    record = logging.LogRecord("provider.app", logging.ERROR, __file__, 1, "failed %s", ("here",), None)
    record.reason = "internal-error"
    try:
        raise ValueError("what went wrong")
    except ValueError as exc:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    line = JsonFormatter().format(record)
    entry = json.loads(line)
    assert entry["message"] == "failed here" and entry["reason"] == "internal-error" and entry["level"] == "error"
    assert entry["error"] == "ValueError: what went wrong"
    assert "Traceback" not in line and "\n" not in line
    assert entry["time"].endswith("Z")


@pytest.mark.parametrize(
    ("overrides", "environ", "expected"),
    [
        ({}, {}, (8888, None)),
        ({}, {"MANIFEST_PROVIDER_METRICS_PORT": "9090"}, (9090, None)),
        ({}, {"MANIFEST_PROVIDER_METRICS_PORT": "0"}, (0, None)),
        ({"METRICS_PORT": 0}, {"MANIFEST_PROVIDER_METRICS_PORT": "9090"}, (0, None)),
        ({"METRICS_BIND": "fd://7"}, {}, (8888, "fd://7")),
        ({"METRICS_PORT": 8443, "BIND": "fd://3"}, {}, (8443, None)),  # the API's socket is inherited
    ],
    ids=["default-8888", "from-the-environment", "off", "flag-wins", "inherited-socket", "api-port-inherited"],
)
def test_the_metrics_port_is_gatekeepers_8888_by_default_and_configurable(
    overrides: dict[str, Any], environ: dict[str, str], expected: tuple[int, str]
) -> None:
    config = load_config(overrides, environ)
    assert (config.metrics_port, config.metrics_bind) == expected


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"METRICS_PORT": 65536}, "METRICS_PORT: 65536 is not a TCP port"),
        ({"METRICS_PORT": -1}, "METRICS_PORT: -1 is not a TCP port"),
        ({"METRICS_PORT": 8443}, "METRICS_PORT \\(8443\\) is the API's port"),
        ({"METRICS_BIND": "fd://seven"}, "METRICS_BIND: fd://<number>"),
    ],
    ids=["above-range", "negative", "the-api-port", "fd-not-a-number"],
)
def test_an_unusable_metrics_port_is_a_config_error(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(overrides, {})


# --- what a policy may make the service read or reach (provider/bounds.py) ---------------------------------------


def test_by_default_a_policy_may_name_no_file_no_other_namespace_and_no_registry() -> None:
    bounds = load_config({}, {}).bounds
    assert (bounds.trusted_root_files, bounds.signature_namespaces, bounds.bundle_repositories) == ((), (), ())
    assert bounds.own_namespace_signatures
    assert load_config({}, {}).registry_hosts == ()


def test_the_bounds_are_read_from_the_environment_and_normalised() -> None:
    config = load_config(
        {},
        {
            "MANIFEST_PROVIDER_TRUSTED_ROOT_FILES": "/etc/roots/a.json,/etc/roots/b.json",
            "MANIFEST_PROVIDER_SIGNATURE_NAMESPACES": "signatures",
            "MANIFEST_PROVIDER_SIGNATURE_OWN_NAMESPACE": "false",
            "MANIFEST_PROVIDER_BUNDLE_REPOSITORIES": "docker.io/myorg,Registry.Example.com/bundles/",
            "MANIFEST_PROVIDER_REGISTRY_HOSTS": "auth.docker.io,[::1]:5000",
        },
    )
    bounds = config.bounds
    assert bounds.trusted_root_files == ("/etc/roots/a.json", "/etc/roots/b.json")
    assert (bounds.signature_namespaces, bounds.own_namespace_signatures) == (("signatures",), False)
    assert bounds.bundle_repositories == ("index.docker.io/myorg", "registry.example.com/bundles")


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TRUSTED_ROOT_FILES", "roots/a.json", "not an absolute, normalised path"),
        ("TRUSTED_ROOT_FILES", "/etc/roots/../shadow", "not an absolute, normalised path"),
        ("TRUSTED_ROOT_FILES", "/etc/roots//a.json", "not an absolute, normalised path"),
        ("SIGNATURE_NAMESPACES", "team-*", "not a namespace name"),
        ("SIGNATURE_NAMESPACES", "Team", "not a namespace name"),
        ("BUNDLE_REPOSITORIES", "myorg", "not a registry host"),
        ("BUNDLE_REPOSITORIES", "registry.example.com/team:v1", "no tag or digest"),
        ("REGISTRY_HOSTS", "https://auth.docker.io", "not host or host:port"),
        ("REGISTRY_HOSTS", "*.docker.io", "not host or host:port"),
        ("REGISTRY_HOSTS", "auth.docker.io:99999", "not a usable URL"),
        ("TRUSTED_ROOT_FILES", "/etc/roots/a.json,", "an empty element"),
    ],
    ids=["relative-path", "dot-dot", "double-slash", "namespace-pattern", "namespace-upper-case",
         "registry-not-a-host", "repository-with-tag", "host-with-scheme", "host-pattern", "host-port-range",
         "trailing-comma"],
)  # fmt: skip
def test_a_bound_that_does_not_parse_stops_the_service_from_starting(name: str, value: str, message: str) -> None:
    """A typo must neither widen a bound nor fail on the first request that meets it."""
    with pytest.raises(ConfigError, match=message):
        load_config({}, {f"MANIFEST_PROVIDER_{name}": value})
