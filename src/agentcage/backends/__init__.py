"""Isolation backends. `namespace` (bubblewrap + network namespaces) is the Linux default."""
