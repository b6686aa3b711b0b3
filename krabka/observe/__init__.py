"""Watching and describing roles from outside: authority checks, role states,
leadership-change events, and the JSON shapes the CLI and the web view share."""
