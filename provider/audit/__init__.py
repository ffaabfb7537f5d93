"""Kubernetes audit logs replayed through the verifier (``docs/classify.md``).

``events`` reads an audit log as the admission reviews it stands for;
``classify`` sorts them into the paper's six traffic classes.
"""
