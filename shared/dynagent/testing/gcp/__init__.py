"""A local Google Cloud: Compute Engine for the real client (``compute``, its parts beside
it, with what a project offers besides VMs in ``catalog``), IAM (``iam``), the gcloud
SDK's Pub/Sub emulator (``pubsub``, topic labels in ``pubsub_topics``), Eventarc's
trigger (``pubsub_events``) and Cloud Functions under functions-framework
(``functions_server``)."""
