"""Both local clouds for the parity scenarios: the AWS fixtures live in tests/conftest.py,
the GCP ones in tests/gcp/conftest.py and are brought in here."""

from tests.gcp.conftest import compute, local_compute

__all__ = ["compute", "local_compute"]
