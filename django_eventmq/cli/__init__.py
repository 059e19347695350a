"""Command-line pieces: options shared by every command, the admin-socket client,
status rendering and the Prometheus endpoint."""
