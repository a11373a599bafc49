"""dynagent: keep a GPU agent fleet sized to a cluster master's pool snapshots."""
