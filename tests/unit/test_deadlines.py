"""The clocks around one Gatekeeper call run out in order, outermost last.

Three budgets nest (docs/operations.md, "Timeouts"):

1. the API server waits ``validatingWebhookTimeoutSeconds`` for Gatekeeper
   (manifests/overlays/gatekeeper/gatekeeper-values.yaml; the chart's default,
   3 s);
2. Gatekeeper waits the Provider's ``timeout`` for the service -- the binding
   limit, whole seconds, covering connection, TLS and answer
   (``constraint/pkg/externaldata/request.go`` ``DefaultSendRequestToProvider``
   in open-policy-agent/frameworks);
3. the service answers by its deadline (``MANIFEST_PROVIDER_DEADLINE_SECONDS``,
   set in the overlay's Deployment patch; ``Config.deadline_seconds`` when
   unset), and inside it a dry-run gives up after the dry-run timeout
   (``Config.dry_run_timeout``, derived from the deadline unless set).

Each must end with room to spare before the one around it, or a slow
verification surfaces as the outer clock's bare timeout ("context deadline
exceeded") instead of the service's own reason. The values are read from the
shipped files, not restated here; the table below shows the check refusing
the orders that used to ship.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from provider.service.config import Config, env_name
from tests.support.data import REPO, load_yaml

GATEKEEPER_OVERLAY = REPO / "manifests" / "overlays" / "gatekeeper"
PROVIDER = GATEKEEPER_OVERLAY / "provider.yaml"
DEPLOY = GATEKEEPER_OVERLAY / "deploy" / "kustomization.yaml"
VALUES = GATEKEEPER_OVERLAY / "gatekeeper-values.yaml"
DEADLINE_ENV = env_name("deadline_seconds")

#: Gatekeeper chart's ``validatingWebhookTimeoutSeconds`` default (charts/gatekeeper/values.yaml).
GATEKEEPER_CHART_WEBHOOK_TIMEOUT = 3
#: Room between the Provider timeout and the service deadline: the connection, the TLS
#: handshake Gatekeeper makes on every call, and reading the answer. Measured calls take
#: milliseconds (docs/performance.md); half a second absorbs a loaded node.
CALL_MARGIN = 0.5
#: Room between Gatekeeper's webhook timeout and the Provider timeout: Gatekeeper still has
#: to evaluate the template on the answer and reply to the API server.
WEBHOOK_MARGIN = 0.5
#: Room between the dry-run timeout and the deadline: comparing the dry-run's result and
#: answering.
DRY_RUN_MARGIN = 0.25


@dataclass(frozen=True)
class Budgets:
    webhook: float
    provider: float
    deadline: float
    dry_run: float


def order_problems(b: Budgets) -> list[str]:
    problems = []
    if not b.webhook - b.provider >= WEBHOOK_MARGIN:
        problems.append(f"Provider timeout {b.provider} s is not {WEBHOOK_MARGIN} s under the webhook's {b.webhook} s")
    if not b.provider - b.deadline >= CALL_MARGIN:
        problems.append(
            f"service deadline {b.deadline} s is not {CALL_MARGIN} s under the Provider timeout {b.provider} s"
        )
    if not b.deadline - b.dry_run >= DRY_RUN_MARGIN:
        problems.append(f"dry-run timeout {b.dry_run} s is not {DRY_RUN_MARGIN} s under the deadline {b.deadline} s")
    if not b.dry_run > 0:
        problems.append("dry-run timeout must be positive")
    return problems


def provider_timeout() -> int:
    (provider,) = load_yaml(PROVIDER)
    timeout = provider["spec"]["timeout"]
    assert isinstance(timeout, int) and not isinstance(timeout, bool)  # Gatekeeper's field is whole seconds
    return timeout


def deployment_env_patch() -> dict[str, str]:
    """The variables the Gatekeeper overlay adds to the Deployment (its JSON6902 patch, read without kustomize)."""
    kustomization = yaml.safe_load(DEPLOY.read_text())
    added: dict[str, str] = {}
    for patch in kustomization["patches"]:
        if patch.get("target", {}).get("kind") != "Deployment":
            continue
        for op in yaml.safe_load(patch["patch"]):
            if op["op"] == "add" and op["path"].endswith("/env/-"):
                added[op["value"]["name"]] = op["value"]["value"]
    return added


def shipped() -> Budgets:
    values = yaml.safe_load(VALUES.read_text())
    deadline = float(deployment_env_patch()[DEADLINE_ENV])
    return Budgets(
        webhook=float(values["validatingWebhookTimeoutSeconds"]),
        provider=float(provider_timeout()),
        deadline=deadline,
        dry_run=Config(deadline_seconds=deadline).dry_run_timeout,
    )


def test_the_values_restate_gatekeepers_default_webhook_timeout() -> None:
    assert yaml.safe_load(VALUES.read_text())["validatingWebhookTimeoutSeconds"] == GATEKEEPER_CHART_WEBHOOK_TIMEOUT


def test_the_shipped_budgets_nest() -> None:
    budgets = shipped()
    assert order_problems(budgets) == [], budgets


def test_the_deadline_is_the_provider_timeout_less_the_call_margin() -> None:
    """One value, the Provider's timeout, decides the service's deadline in the overlay."""
    assert float(deployment_env_patch()[DEADLINE_ENV]) == provider_timeout() - CALL_MARGIN


def test_the_service_default_fits_the_shipped_provider_too() -> None:
    """Run without the overlay's variable (another manifest, ``serve`` by hand), the default still nests."""
    default = Config()
    budgets = Budgets(
        webhook=GATEKEEPER_CHART_WEBHOOK_TIMEOUT,
        provider=provider_timeout(),
        deadline=default.deadline_seconds,
        dry_run=default.dry_run_timeout,
    )
    assert order_problems(budgets) == [], budgets


def test_both_provider_files_carry_the_same_timeout() -> None:
    policy_copy = REPO / "policies" / "gatekeeper" / "verify-manifest-signature" / "provider.yaml"
    assert policy_copy.read_text() == PROVIDER.read_text()


@pytest.mark.parametrize(
    ("budgets", "complaint"),
    [
        # What shipped before: the service's 2.5 s default outlived the Provider's 2 s.
        (Budgets(webhook=3, provider=2, deadline=2.5, dry_run=1.5), "service deadline 2.5 s"),
        (Budgets(webhook=3, provider=3, deadline=1.5, dry_run=0.9), "Provider timeout 3"),
        (Budgets(webhook=3, provider=2, deadline=1.9, dry_run=0.9), "service deadline 1.9 s"),
        (Budgets(webhook=3, provider=2, deadline=1.5, dry_run=1.4), "dry-run timeout 1.4 s"),
    ],
    ids=["old-default-deadline", "provider-at-webhook", "deadline-hugging-provider", "dry-run-hugging-deadline"],
)
def test_a_bad_order_is_caught(budgets: Budgets, complaint: str) -> None:
    assert any(complaint in p for p in order_problems(budgets))


def test_kyverno_gives_the_service_more_than_its_deadline() -> None:
    """The CEL policy's webhook timeout (Kyverno's own call is bounded inside it) outlasts the default deadline."""
    cel = REPO / "policies" / "kyverno" / "verify-manifest-signature-cel" / "verify-manifest-signature-cel.yaml"
    (doc,) = load_yaml(cel)
    spec: dict[str, Any] = doc["spec"]
    assert spec["webhookConfiguration"]["timeoutSeconds"] - Config().deadline_seconds >= CALL_MARGIN


def test_dry_run_timeout_follows_the_deadline() -> None:
    assert Config(deadline_seconds=1.5).dry_run_timeout == pytest.approx(0.9)
    assert Config(deadline_seconds=10).dry_run_timeout == pytest.approx(1.5)
