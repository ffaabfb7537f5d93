"""Packaging beyond setup.cfg: the shipped policies as package data.

``policies/`` stays at the repository's root, in the gatekeeper-library and
kyverno/policies layouts that Artifact Hub reads. A wheel carries its YAML as
the package data of ``provider._policies``: ``package_dir`` maps that package
to ``policies/``, so the build copies the files from there -- there is no
second copy in the repository to drift. ``manifest-provider policy`` reads
them from the installed package (provider/cli/_generate.py,
``shipped_policies_dir``). setup.cfg cannot list a mapped package beside
``find_namespace:``, hence this file.

Only ``gatekeeper`` and ``kyverno`` are packages (the names Python can import):
their ``**/*.yaml`` is the data, so the scripts that write samples and the
Artifact Hub metadata stay out of the wheel, and so do the ``.kyverno-test``
folders (setuptools' globs skip hidden names).
"""

from setuptools import find_namespace_packages, setup

POLICY_PACKAGES = ["provider._policies.gatekeeper", "provider._policies.kyverno"]

setup(
    packages=[*find_namespace_packages(include=["provider", "provider.*"]), *POLICY_PACKAGES],
    package_dir={"provider._policies": "policies"},
    package_data={name: ["**/*.yaml"] for name in POLICY_PACKAGES},
)
