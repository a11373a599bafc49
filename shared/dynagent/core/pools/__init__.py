"""Provider sections of a pool config, one module per cloud."""
