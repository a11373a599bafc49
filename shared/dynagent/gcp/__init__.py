"""The GCP side: the Compute Engine adapter, Pub/Sub and the Cloud Functions' glue.

The only package that imports Google's client libraries, and only when it needs them:
``google.cloud.compute_v1`` alone takes seconds to import.
"""
