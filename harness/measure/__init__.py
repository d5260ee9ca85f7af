"""The measurement core: load patterns, the streaming client, the scraper, client health."""
