"""Hypothesis settings shared by the property tests (test_properties_*_cpu.py)."""

from hypothesis import HealthCheck, settings

PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
# Valid calls run the CPU reference (a compile per new shape): fewer examples.
RUNNING = settings(PROPERTY, max_examples=50)
