"""resourceBundleRef: the object chooses its reference, and the allow-list must not be wider than written.

From an attack pass without any signing key (docs/security.md): each test is named by the attack; a table
row's id names the input.
"""

from __future__ import annotations

import pytest

from provider.errors import PolicyError
from provider.signatures.sources import BundleOptions

# --- resourceBundleRef: the object chooses its reference, the allow-list must not be wider than written ---------


@pytest.mark.parametrize(
    "prefix",
    ["myorg", "team-bundles", "bundles/"],
    ids=["docker-hub-org-name", "dashed-name", "name-with-trailing-slash"],
)
def test_a_repository_prefix_without_a_registry_never_means_all_of_docker_hub(prefix: str) -> None:
    # "myorg" used to parse as index.docker.io/library/myorg and was kept as its registry: every Docker Hub
    # repository, where anyone can push a bundle and sign it with their own key... or copy a signed one.
    with pytest.raises(PolicyError, match="not a registry host"):
        BundleOptions.from_dict({"repositories": [prefix]}, "resourceBundleRef")


@pytest.mark.parametrize(
    ("prefix", "kept"),
    [
        ("ghcr.io", "ghcr.io"),
        ("GHCR.io", "ghcr.io"),
        ("localhost:5000", "localhost:5000"),
        ("127.0.0.1:5000", "127.0.0.1:5000"),
        ("docker.io", "index.docker.io"),
        ("myorg/bundles", "index.docker.io/myorg/bundles"),
        ("ghcr.io/org", "ghcr.io/org"),
    ],
    ids=["host", "host-upper-case", "localhost-port", "ip-port", "docker-hub-by-name", "hub-namespace", "repository"],
)
def test_registry_hosts_and_repository_prefixes_keep_their_meaning(prefix: str, kept: str) -> None:
    assert BundleOptions.from_dict({"repositories": [prefix]}, "r").repositories == (kept,)


@pytest.mark.parametrize(
    "reference",
    [
        "registry.example.com/team/app:t\u00e4g",
        "registry.example.com/team/app:\u0663",
        "registry.example.com/team/app:\uff41",
    ],
    ids=["latin-letter", "arabic-digit", "fullwidth-letter"],
)
def test_a_tag_is_ascii_as_in_the_distribution_grammar(reference: str) -> None:
    # distribution/reference's tag is [\w][\w.-]{0,127} with Go's ASCII \w; Python's \w took any letter
    # or digit, and the request line then failed to encode: bundle-unavailable (a registry fault, never
    # cached) for what is a malformed reference in the object.
    from provider.errors import VerificationFailure
    from provider.signatures.sources import Reference

    with pytest.raises(VerificationFailure, match="invalid tag"):
        Reference.parse(reference)
