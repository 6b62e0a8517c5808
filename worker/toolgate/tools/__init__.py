"""Operator and contract-author tools: lint, diff, fixtures, demo traffic, replay, quarantine, top, ACLs."""
