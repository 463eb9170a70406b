"""The localhost console: the report page served live, with history and shipped-preset runs."""
