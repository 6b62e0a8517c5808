"""The settings property tests run with in CI, in one place.

Derandomized: the same examples on every run, so a test that counts what it exercised (or
fails on a rare draw) cannot pass or fail by chance. No example database (a CI machine has
none to share) and no deadline (a loaded machine is slow, not wrong). Every health check is
suppressed here; a test that wants some kept names the ones it suppresses::

    @settings(DERANDOMIZED, max_examples=300, suppress_health_check=[HealthCheck.too_slow])
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

DERANDOMIZED = settings(
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)

# Any JSON value, small: what a result's fields may hold when a sender chooses them.
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
