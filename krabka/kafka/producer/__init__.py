"""A role's fenced producer: its transactions, lease writes, and the requests to
its transaction coordinator."""
