"""What every process uses: settings, the transport (the only zmq module), security,
logs, stats, the job registry and the hooks the Django layer installs. Never imports Django."""
