"""railctl, the operator command line (offline commands and the admin API client)."""
