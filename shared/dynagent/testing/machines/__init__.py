"""Agent machines: one cloud VM's user data booted on a real Docker Engine
(``agent_machine``), in namespaces of its own (``namespace``, ``netns``) with its dockerd
(``docker_engine``), instance metadata (``metadata_service``), a route to the master
(``master_routes``), Determined's agent image (``agent_image``) and the GPU host's
programs (``runtime_shims``)."""
