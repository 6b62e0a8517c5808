"""The settings property tests run with in CI, in one place.

Derandomized: the same examples on every run, so a test that counts what it exercised (or
fails on a rare draw) cannot pass or fail by chance. No example database (a CI machine has
none to share) and no deadline (a loaded machine is slow, not wrong). Every health check is
suppressed here; a test that wants some kept names the ones it suppresses::

    @settings(DERANDOMIZED, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

DERANDOMIZED = settings(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
